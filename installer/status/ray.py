"""The `ray` column: for a model spanning hosts (vLLM's Ray backend), each member of its Ray
cluster, asked now over SSH: the private-llm-ray unit's state and restarts on the head and every
worker. A member down (its unit failed, or restarting) is named on the engine's row and under the
table, since the engine cannot serve without every pipeline stage; a worker host has no engine
row of its own. The same answer says whether each member's firewall unit ran and whether the
kernel still holds its `inet pli_ray` table (a member without it is named with the fix).
Deployments without a Ray cluster get no SSH at all (#36 item 2)."""

from collections.abc import Callable, Sequence

from installer.gpu import ray_firewall, ray_ports
from installer.hosts import remote
from installer.hosts.ssh import Target, target
from installer.preparation import inventory_checks
from installer.status.model import Column, Context, Row

# Whether the kernel holds the rules, not only whether their unit ran: the unit is a oneshot, so
# an outside `nft flush ruleset` (a site's script, an nftables.conf loaded by hand) leaves it
# "active" with no table. present: the table and its reject rule; empty: the table without it
# (`nft flush table`); absent: no table; no-nft: nft not installed. Runs as root (remote.run_one).
TABLE_PROBE = (
    "if ! command -v nft >/dev/null 2>&1; then echo table=no-nft; "
    f"elif ! nft list table inet {ray_firewall.TABLE} >/dev/null 2>&1; then echo table=absent; "
    f"elif nft list chain inet {ray_firewall.TABLE} input 2>/dev/null | grep -q 'reject with tcp reset'; "
    "then echo table=present; else echo table=empty; fi")
# the unit's state and how often systemd restarted it (Restart=on-failure), and whether the unit
# keeping Ray's ports to the cluster's hosts holds its rules (installer/gpu/ray_firewall.py)
PROBE = (f"systemctl show -p ActiveState,SubState,NRestarts --value {ray_ports.UNIT}.service; "
         f"echo firewall=$(systemctl is-active {ray_firewall.UNIT}.service); {TABLE_PROBE}")
_TABLE_WORDS = {
    "absent": f"nftables has no table inet {ray_firewall.TABLE}",
    "empty": f"table inet {ray_firewall.TABLE} has lost its rules",
    "no-nft": "nft is not installed",
}
RunOne = Callable[..., remote.Result]


def _members(text: str) -> str:
    return text if text.endswith(" up") else f"[bold red]{text}[/]"


def member_state(text: str) -> tuple[bool, str]:
    """(up, words) from PROBE's three lines: ActiveState, SubState, NRestarts."""
    lines = [x.strip() for x in text.strip().splitlines() if not x.startswith(("firewall=", "table="))]
    active, sub, restarts = [*lines, "", "", ""][:3]
    up = active == "active" and sub == "running"
    words = f"{active or 'unknown'} ({sub or '?'})"
    if restarts not in ("", "0"):
        words += f", restarted {restarts} time(s)"
    return up, words


def firewall_state(text: str) -> str | None:
    """`systemctl is-active` of the Ray firewall's unit from PROBE's output (None: not asked)."""
    return _value(text, "firewall")


def table_state(text: str) -> str | None:
    """TABLE_PROBE's verdict on the `inet pli_ray` table from PROBE's output (None: not asked)."""
    return _value(text, "table")


def _value(text: str, key: str) -> str | None:
    return next((x.split("=", 1)[1].strip() for x in text.splitlines() if x.startswith(f"{key}=")), None)


class RayCollector:
    columns: Sequence[Column] = (Column("ray", "ray", _members),)

    def __init__(self, run_one: RunOne | None = None) -> None:
        self.run_one = run_one or remote.run_one  # the SSH edge, stood in by the tests

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        inv = ctx.inventory
        if inv.engine.device != "gpu" or inv.gpu.type is None:  # only a tuned GPU layout spans hosts
            return
        plan = inventory_checks.check_inventory(inv)
        nodes = [(h.name, h.ray) for h in plan.hosts if h.ray is not None]
        if not nodes:
            return
        hosts = {h.name: h for h in inv.hosts}
        members: list[tuple[Target, str]] = [(target(inv, hosts[name]), node.role) for name, node in nodes]
        answers = remote.each(members, lambda m: self.run_one(m[0], PROBE, timeout=ctx.timeout_s))
        down: list[str] = []
        open_ports: list[str] = []
        for (t, role), r in zip(members, answers, strict=True):
            if not r.ok:
                down.append(f"Ray {role} {t.name} ({t.address}): no answer over SSH: {r.why}")
                continue
            up, words = member_state(r.text)
            if not up:
                down.append(f"Ray {role} {t.name} ({t.address}): {ray_ports.UNIT}.service {words}; the model "
                            f"spanning hosts cannot serve until it is back (`installer up` starts it again)")
            fw = firewall_state(r.text)
            if fw not in (None, "active"):
                open_ports.append(f"Ray {role} {t.name} ({t.address}): {ray_firewall.UNIT}.service {fw}: Ray's "
                                  f"ports ({ray_ports.firewall_text()}) answer every host, not only the "
                                  "cluster's (`installer up` applies the rules again)")
            elif fw == "active" and (table := table_state(r.text)) not in (None, "present"):
                # the unit ran, the rules are gone since: restarting the oneshot loads them again
                open_ports.append(f"Ray {role} {t.name} ({t.address}): {ray_firewall.UNIT}.service is active "
                                  f"but {_TABLE_WORDS.get(table, table)} (an `nft flush ruleset` since it "
                                  f"ran?): Ray's ports ({ray_ports.firewall_text()}) answer every host, not "
                                  f"only the cluster's (`systemctl restart {ray_firewall.UNIT}` on {t.name}, "
                                  "or `installer up`)")
        head = next(name for name, node in nodes if node.role == "head")
        summary = f"{len(nodes)}/{len(nodes)} up" if not down else f"{len(down)}/{len(nodes)} down"
        for row in rows:
            if row.host != head:
                continue
            row.values["ray"] = summary
            row.problems += down + open_ports
            # out of the gateways' rotation (ReadinessCollector, before) with every Ray unit up: the
            # units do not see a vLLM worker of a stage that died; vLLM's driver does, and exits
            if row.values.get("ready") is False and not down:
                spans = ", ".join(name for name, _ in nodes)
                row.problems.append(
                    f"engine {row.engine} spans hosts {spans} (vLLM's Ray backend) and is out of rotation "
                    "with every Ray unit up: a stage's vLLM worker may have died (`journalctl -u "
                    f"private-llm-engine` on {head}: 'RayWorkerProc rank=N died unexpectedly'); systemd "
                    "restarts the engine when vLLM exits, `installer up` if it does not come back")

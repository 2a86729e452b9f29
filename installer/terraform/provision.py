"""The provision step: inventory -> Terraform -> hosts, and the way back (`installer down`).

Every check that needs no API call runs first: the inventory (formats, regions, CIDRs) is
validated by the loader, credentials are looked for here, and only then does terraform run.
"""

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from installer.base.paths import STATE_DIR_NAME
from installer.hosts.sshkeys import KEY_NAME, ensure_key_pair, known_hosts_lines
from installer.inventory import Host, Inventory
from installer.terraform import contract, credentials, mirror, tfvars
from installer.terraform.cli import ChangeSummary, Event, Terraform
from installer.terraform.errors import TerraformError
from installer.terraform.workdir import workdir

Note = Callable[[str], None]
# Providers whose module can install a host key we generated (cloud-init user data); the
# hosts' first SSH connection is then checked against a known key, never trusted blindly.
PINS_HOST_KEYS = {"aws", "tencentcloud"}


@dataclass
class Workspace:
    inv: Inventory
    dir: Path
    tf: Terraform

    @property
    def host_key(self) -> Path:
        return self.dir / "host-key" / KEY_NAME  # the hosts' key, not a login key


def prepare(
    inv: Inventory,
    *,
    tools: mirror.TerraformTools | None = None,
    env: Mapping[str, str] = os.environ,
    note: Note = lambda _m: None,
) -> Workspace:
    """Check credentials, write root module and tfvars, `terraform init` (offline with a mirror).

    `tools` come from a bundle that bundle.build.open_bundle verified
    (bundle.terraform_tools.from_bundle): that terraform runs here with the cloud credentials in
    its environment, so an unchecked path is never accepted. None: mirror.locate's."""
    if inv.provider == "baremetal" or inv.cloud is None:
        raise TerraformError("provider baremetal has no cloud resources; Terraform is not used")
    extra_env = credentials.check(inv.provider, env)  # before anything can reach an API
    wd = workdir(inv)
    _refuse_a_second_fleet(inv, wd)
    wd.mkdir(parents=True, exist_ok=True)
    tools = tools or mirror.locate(wd, env)
    mirror.check_signed(tools)  # a bundle's terraform: still the bytes its bundle signed
    host_key = None
    if inv.provider in PINS_HOST_KEYS:
        key = ensure_key_pair(wd / "host-key", f"{inv.deployment} host key")  # an ed25519 pair
        host_key = (key.read_text(), key.with_suffix(".pub").read_text().strip())
    tfvars.write(inv, wd, host_key)
    run_env = {**env, **extra_env, **mirror.cli_env(wd, tools)}
    tf = Terraform(tools.binary, wd, run_env)
    source = f", providers from {tools.plugin_mirror}" if tools.plugin_mirror else ""
    note(f"terraform {tf.version()} in {wd}{source}")
    tf.init()
    mirror.remember(wd, tools)
    return Workspace(inv, wd, tf)


def _resources(state_file: Path) -> int:
    try:
        return len(json.loads(state_file.read_text()).get("resources") or [])
    except (OSError, ValueError):
        return 0


def _refuse_a_second_fleet(inv: Inventory, wd: Path) -> None:
    """No Terraform state here but one in ./.installer (where state lived before it moved next
    to the inventory, or the folder `up` used to be run from): applying would create the whole
    fleet a second time, so say where the state is instead."""
    if _resources(wd / "terraform.tfstate"):
        return
    other = Path(STATE_DIR_NAME).resolve() / "terraform" / inv.deployment
    if other != wd and _resources(other / "terraform.tfstate"):
        raise TerraformError(
            f"deployment {inv.deployment} has no Terraform state in {wd}, but {other} has one; "
            "nothing was changed",
            [
                f"use that state: `installer --state-dir {other.parent.parent} ...`, or move "
                f"{other.parent.parent} next to the inventory",
                "with this empty state Terraform would create every machine a second time",
            ],
        )


def describe(summary: ChangeSummary) -> str:
    return f"{summary.add} to add, {summary.change} to change, {summary.remove} to destroy"


def _progress(note: Note) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if event.get("type") in ("apply_complete", "apply_errored"):
            note(str(event.get("@message", "")))

    return on_event


def plan(ws: Workspace, *, destroy: bool = False) -> tuple[ChangeSummary, Path]:
    out = ws.dir / ("destroy.tfplan" if destroy else "up.tfplan")
    return ws.tf.plan(out, destroy=destroy), out


def apply(ws: Workspace, plan_file: Path, note: Note) -> ChangeSummary:
    try:
        return ws.tf.apply(plan_file, on_event=_progress(note))
    finally:
        plan_file.unlink(missing_ok=True)  # a saved plan is stale once applied (or failed)


def hosts(ws: Workspace) -> tuple[Inventory, list[contract.ProvisionedHost]]:
    """The inventory with the provisioned hosts in it (and a known_hosts file pinning them)."""
    inv, cloud = ws.inv, ws.inv.cloud
    assert cloud is not None
    found = contract.parse(ws.tf.outputs())
    if not found:
        raise TerraformError(
            f"no {inv.provider} hosts exist for deployment {inv.deployment}",
            ["`installer plan` shows what `installer up` would create"],
        )
    new_hosts: list[Host] = contract.to_inventory_hosts(found, public=cloud.public_ip)
    ssh = inv.ssh
    if inv.provider in PINS_HOST_KEYS and ws.host_key.with_suffix(".pub").is_file():
        ssh = ssh.model_copy(update={"known_hosts": _write_known_hosts(ws, new_hosts)})
    return inv.model_copy(update={"hosts": new_hosts, "ssh": ssh}), found


def _write_known_hosts(ws: Workspace, new_hosts: list[Host]) -> Path:
    """Our pinned key for every host address, after the user's own known_hosts lines (if any)."""
    public = ws.host_key.with_suffix(".pub").read_text().strip()
    port = ws.inv.ssh.port
    names = [h.address if port == 22 else f"[{h.address}]:{port}" for h in new_hosts]
    lines = known_hosts_lines({name: [public] for name in names})
    own = ws.inv.ssh.known_hosts
    head = own.read_text() if own and own.is_file() else ""
    path = ws.dir / "known_hosts"
    path.write_text(
        head + ("" if not head or head.endswith("\n") else "\n") + "\n".join(lines) + "\n"
    )
    return path


def provision(
    inv: Inventory,
    *,
    apply_changes: bool = True,
    tools: mirror.TerraformTools | None = None,
    note: Note = lambda _m: None,
) -> Inventory:
    """`installer up`'s provision phase: plan, apply, read the hosts back.

    With apply_changes=False (`up --check`, `installer plan`) nothing changes: the hosts come
    from the current state.
    """
    ws = prepare(inv, tools=tools, note=note)
    if apply_changes:
        summary, plan_file = plan(ws)
        if summary.has_changes:
            note(f"terraform: {describe(summary)}")
            done = apply(ws, plan_file, note)
            note(f"terraform applied: {done.add} added, {done.change} changed, {done.remove} gone")
        else:
            plan_file.unlink(missing_ok=True)
            note("terraform: infrastructure up to date")
    result, found = hosts(ws)
    for h in found:
        gpu = f"{h.gpu_count or '?'} x {h.gpu_type}" if h.gpu_type else "no GPU listed"
        note(f"{h.name}: {h.public_address or '-'} / {h.private_address or '-'}, {gpu}")
    return result

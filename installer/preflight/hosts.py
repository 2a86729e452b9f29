"""Preflight: before any host is changed, check every host over SSH (Fabric), all in parallel.

Any problem on any host stops the run with one line per host saying why, so a bad host is
found in seconds, not halfway through a configuration run.
"""

import shlex
import time
from dataclasses import dataclass, field

import paramiko
from fabric import Connection

from installer.base.errors import PreflightError
from installer.hosts import remote
from installer.hosts.ssh import Target, targets
from installer.inventory import Inventory
from installer.inventory import targets as os_targets
from installer.preflight import gpu as preflight_gpu

MIN_PYTHON = (3, 9)
MAX_CLOCK_SKEW_S = 120
GIB = 1024**3

# One shell round trip gathers everything; each line is `key=value`.
_PROBE = r"""
. "${PLI_OS_RELEASE:-/etc/os-release}"; echo "os_id=$ID"; echo "os_version=$VERSION_ID"
echo "os_like=$ID_LIKE"; echo "os_pretty=$PRETTY_NAME"
pyv() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
echo "python=$(pyv python3)"
echo "python_full=$(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null)"
echo "system_python=$(pyv /usr/bin/python3)"
echo "glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)"
echo "kernel=$(uname -r)"
[ -z "$PLI_HOST_TORCH" ] || echo "host_torch_python=$(pyv "$PLI_HOST_TORCH/bin/python3")"
echo "init=$(cat /proc/1/comm)"
echo "uid=$(id -u)"; echo "sudo=$(sudo -n true 2>/dev/null && echo yes || echo no)"
echo "cpus=$(nproc)"
echo "mem_total_kib=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)"
echo "disk_var_lib=$(df -B1 --output=avail /var/lib | tail -1 | tr -d ' ')"
echo "disk_opt=$(df -B1 --output=avail /opt | tail -1 | tr -d ' ')"
echo "same_fs=$([ "$(stat -c %d /opt)" = "$(stat -c %d /var/lib)" ] && echo yes || echo no)"
echo "bundle_present=$([ -f "$PLI_BUNDLE_DIR/manifest.json" ] && echo yes || echo no)"
echo "release_json=$({ cat "$PLI_RELEASE_FILE" || sudo -n cat "$PLI_RELEASE_FILE"; } 2>/dev/null | tr -d '\n')"
echo "now=$(date +%s)"
"""


@dataclass(frozen=True)
class Needs:
    """Space the install will take on a host, and what it must already have."""

    bundle_bytes: int
    venv_bytes: int
    model_bytes: int
    min_memory_bytes: int
    bundle_dir: str
    # What the host says it runs (its release.json, on one line; "" when it has none), read so
    # that `up` can refuse a control-machine state that does not know that revision.
    release_file: str
    # A GPU deployment's needs (installer/preflight/gpu.py); None for CPU engines.
    gpu: preflight_gpu.GPUNeeds | None = None
    # {host name: declared OS target} and the targets the bundle carries (None: not checked).
    host_targets: dict[str, str] = field(default_factory=dict)
    carried: tuple[str, ...] | None = None
    # engine.host_torch, the Python minor its environment must have (the bundle's lock), and the
    # hosts that run an engine from it (the serving hosts).
    host_torch: str | None = None
    host_torch_python: str = ""
    host_torch_hosts: tuple[str, ...] = ()


@dataclass
class HostReport:
    name: str
    address: str
    facts: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def cpu_counts(reports: list[HostReport]) -> dict[str, int]:
    """Each host's CPUs as its probe counted them (nproc): the plan sizes the gateways from them."""
    return {r.name: int(r.facts["cpus"]) for r in reports if r.facts.get("cpus", "").isdigit()}


def _connect(t: Target) -> Connection:
    kwargs: dict[str, object] = {"allow_agent": t.private_key is None, "look_for_keys": t.private_key is None}
    if t.private_key:
        kwargs["key_filename"] = str(t.private_key)
    conn = Connection(host=t.address, user=t.user, port=t.port, connect_timeout=10, connect_kwargs=kwargs)
    # Fabric accepts unknown host keys by default; we never do.
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    if t.known_hosts:
        conn.client.load_host_keys(str(t.known_hosts))
    else:
        conn.client.load_system_host_keys()
    return conn


def _judge(facts: dict[str, str], needs: Needs, skew: float) -> list[str]:
    problems = []
    py = facts.get("python", "")
    if not py:
        problems.append("python3 is missing; install the python3 package (Ansible needs it)")
    elif tuple(int(x) for x in py.split(".")) < MIN_PYTHON:
        problems.append(f"python3 is {py}; need >= {'.'.join(map(str, MIN_PYTHON))}")
    if facts.get("init") != "systemd":
        problems.append(not_systemd(facts.get("init", "")))
    if facts.get("uid") != "0" and facts.get("sudo") != "yes":
        problems.append("the SSH user is not root and cannot sudo without a password")
    bundle = 0 if facts.get("bundle_present") == "yes" else needs.bundle_bytes
    var_lib_need = bundle + needs.model_bytes
    opt_need = needs.venv_bytes
    var_lib, opt = int(facts.get("disk_var_lib") or 0), int(facts.get("disk_opt") or 0)
    if facts.get("same_fs") == "yes":
        var_lib_need += opt_need
        opt_need = 0
    if var_lib < var_lib_need:
        problems.append(f"/var/lib has {var_lib / GIB:.1f} GiB free, need {var_lib_need / GIB:.1f} GiB")
    if opt < opt_need:
        problems.append(f"/opt has {opt / GIB:.1f} GiB free, need {opt_need / GIB:.1f} GiB")
    mem = int(facts.get("mem_total_kib") or 0) * 1024
    if mem < needs.min_memory_bytes:
        problems.append(f"memory is {mem / GIB:.1f} GiB, need {needs.min_memory_bytes / GIB:.1f} GiB")
    if abs(skew) > MAX_CLOCK_SKEW_S:
        problems.append(f"clock is off by {skew:+.0f} s from this machine; enable NTP (chrony)")
    problems += preflight_gpu.judge(facts, needs.gpu)
    return problems


def judge_os(facts: dict[str, str], needs: Needs, host: str) -> list[str]:
    """The host's OS against its declared target and the bundle; its interpreters against the
    target's and engine.host_torch's."""
    fields = {
        "ID": facts.get("os_id", ""), "VERSION_ID": facts.get("os_version", ""),
        "ID_LIKE": facts.get("os_like", ""), "PRETTY_NAME": facts.get("os_pretty", ""),
    }
    declared = needs.host_targets.get(host)
    if declared is None:  # not declared to this check: judge the OS on its own
        found = os_targets.of_os_release(fields)
        declared = found.name if found else os_targets.DEFAULT
    problems = os_targets.judge_os(fields, declared, list(needs.carried) if needs.carried is not None else None)
    if problems:
        return problems
    t = os_targets.get(declared)
    system = facts.get("system_python", "")
    if not system:
        problems.append(
            f"{t.system_python} is missing: the gateway's environment is made from it; install "
            f"{t.name}'s python3 package"
        )
    elif system != t.python_minor:
        problems.append(
            f"{t.system_python} is Python {system}, not {t.name}'s {t.python_minor} that the bundle's "
            "wheels are built for; restore the release's python3"
        )
    if needs.host_torch and host in needs.host_torch_hosts:
        have = facts.get("host_torch_python", "")
        python = f"{needs.host_torch}/bin/python3"
        if not have:
            problems.append(
                f"engine.host_torch: {python} is missing or does not run; point host_torch at the "
                "CUDA PyTorch environment's folder (the one holding bin/python3), or remove it"
            )
        elif needs.host_torch_python and have != needs.host_torch_python:
            problems.append(
                f"engine.host_torch: {python} is Python {have}, the bundle's vLLM wheels need "
                f"{needs.host_torch_python}; use an environment of that Python, or remove host_torch"
            )
    return problems


def not_systemd(init: str) -> str:
    """Why a host whose PID 1 is not systemd is refused, and the fix (docs/gpu.md says why)."""
    return (
        f"PID 1 is {init!r}, not systemd: the engine and gateway run as systemd units (restart on "
        "failure, the gateway's socket and drain on stop, sandboxing, `installer status`), so this "
        "host is refused; boot it with systemd as init, or, in a GPU container, run a systemd "
        "container with the GPUs passed through (docs/gpu.md, hosts without systemd)"
    )


def parse_facts(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def check_host(t: Target, needs: Needs) -> HostReport:
    report = HostReport(t.name, t.address)
    host_torch = (needs.host_torch or "") if t.name in needs.host_torch_hosts else ""
    try:
        with _connect(t) as conn:
            before = time.time()
            command = (
                f"PLI_BUNDLE_DIR={shlex.quote(needs.bundle_dir)} "
                f"PLI_RELEASE_FILE={shlex.quote(needs.release_file)} "
                f"PLI_HOST_TORCH={shlex.quote(host_torch)} "
                f"sh -c {shlex.quote(_PROBE + (preflight_gpu.PROBE if needs.gpu else ''))}"
            )
            result = conn.run(command, hide=True, warn=True, in_stream=False)
            after = time.time()
    except paramiko.BadHostKeyException:
        report.problems.append("host key does NOT match known_hosts (possible impersonation); check the host")
        return report
    except paramiko.SSHException as exc:
        msg = str(exc)
        if "not found in known_hosts" in msg:
            msg = "host key unknown; add it to known_hosts (ssh-keyscan, checked out of band)"
        report.problems.append(f"SSH failed: {msg}")
        return report
    except OSError as exc:
        report.problems.append(f"SSH unreachable at {t.address}:{t.port}: {exc.strerror or exc}")
        return report
    facts = parse_facts(result.stdout)
    report.facts = facts
    skew = float(facts.get("now") or 0) - (before + after) / 2
    report.problems = judge_os(facts, needs, t.name) + _judge(facts, needs, skew)
    return report


def run_preflight(inv: Inventory, needs: Needs) -> list[HostReport]:
    hosts = targets(inv)
    reports = remote.each(hosts, lambda t: check_host(t, needs))
    failed = [r for r in reports if not r.ok]
    if failed:
        lines = [f"{r.name} ({r.address}): {'; '.join(r.problems)}" for r in failed]
        raise PreflightError(
            f"preflight failed on {len(failed)} of {len(reports)} host(s); no host was changed", lines
        )
    return reports

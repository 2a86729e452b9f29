"""Run a playbook through ansible-runner and read its events and per-host stats (no text scraping)."""

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_mitogen
from ansible_runner.interface import init_runner

from installer.base.errors import AnsibleError
from installer.base.paths import PLAYBOOKS_DIR, control_socket_dir, private_dir
from installer.base.procs import ChildGroup

# (host, task name, status) for each finished task on a host; status: ok/changed/failed/skipped/unreachable
TaskEvent = Callable[[str, str, str], None]


@dataclass
class HostResult:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    error: str = ""
    changed_tasks: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass
class PlaybookResult:
    status: str
    rc: int
    hosts: dict[str, HostResult]
    artifacts: Path

    @property
    def success(self) -> bool:
        return self.rc == 0 and all(h.success for h in self.hosts.values())

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


_STATUS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


def changed(event: dict[str, Any]) -> bool:
    """Whether a task's ok event changed something. A no_log task's result is censored, its
    `changed` included: then only the event's own output line ("changed: [host]") says."""
    res = (event.get("event_data") or {}).get("res") or {}
    if "censored" in res:
        return _CHANGED_LINE.match(str(event.get("stdout") or "")) is not None
    return bool(res.get("changed"))


_CHANGED_LINE = re.compile(r"\s*(?:\x1b\[[0-9;]*m)*changed: \[")


def _failure_text(res: dict[str, Any]) -> str:
    """The most telling line of a failed result: a command's stderr beats Ansible's summary."""
    # A loop fails as "One or more items failed"; the reason is in the first failed item.
    failed_items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if failed_items:
        item = failed_items[0]
        label = item.get("_ansible_item_label", item.get(str(item.get("ansible_loop_var") or "item"), ""))
        return f"{label}: {_failure_text(item)}" if label not in ("", None) else _failure_text(item)
    msg = str(res.get("msg") or "")
    stderr = str(res.get("stderr") or "").strip()
    if stderr and (not msg or "non-zero return code" in msg):
        lines = stderr.splitlines()
        # Our probes put the reason first; other commands end with it.
        return lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return msg.strip() or "failed"


# Where the PID of ansible-playbook's group leader is recorded in the run folder (by die_with_parent.py).
PIDFILE = "ansible-playbook.pid"


def die_with_parent_argv(command: list[str], pidfile: Path) -> list[str]:
    """`command` started through die_with_parent.py: it records its PID and, on Linux, gets
    SIGTERM when this process dies, even by SIGKILL."""
    helper = Path(__file__).with_name("die_with_parent.py")
    return [sys.executable, "-I", "-S", str(helper), str(os.getpid()), str(pidfile), "--", *command]


# What ansible-playbook and ssh need from this process's environment; everything else (cloud
# credentials, tokens, the operator's own settings) stays out of Ansible and its artifacts.
_INHERITED = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SSH_AUTH_SOCK"}
_INHERITED_PREFIXES = ("LC_",)
# What ansible-runner itself sets for its event callback and artifacts: it may equal a value the
# operator exported (a second runner's), and the run needs it all the same.
_RUNNER_SETS = {
    "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS", "AWX_ISOLATED_DATA_DIR",
    "RUNNER_OMIT_EVENTS", "RUNNER_ONLY_FAILED_EVENTS",
}
_SECRET = re.compile(
    r"SECRET|TOKEN|PASSW|CREDENTIAL|ACCESS_KEY|PRIVATE_KEY(?!_FILE)|^(AWS|TENCENTCLOUD|JDCLOUD)_", re.I
)


def ansible_env(
    env: Mapping[str, str], inherited: Mapping[str, str], ours: Iterable[str] = ()
) -> dict[str, str]:
    """The environment ansible-playbook runs with: every name in `ours` (what the installer and
    ansible-runner set on purpose, kept even when the operator exported the same value); from
    `inherited` (this process's), only the allow-listed names; whatever else ansible-runner set on
    top of it; never another secret-looking name. This interpreter's bin directory leads PATH,
    where ansible-playbook is."""
    keep = set(ours)
    out = {}
    for name, value in env.items():
        changed = inherited.get(name) != value  # set (or changed) by ansible-runner
        allowed = name in _INHERITED or name.startswith(_INHERITED_PREFIXES)
        if name in keep or ((changed or allowed) and not _SECRET.search(name)):
            out[name] = value
    bin_dir = str(Path(sys.executable).parent)
    path = out.get("PATH", os.defpath).split(os.pathsep)
    out["PATH"] = os.pathsep.join([bin_dir, *(d for d in path if d != bin_dir)])
    return out


# Mitogen's strategy runs each host's modules in one Python interpreter kept over one SSH
# connection, instead of a new interpreter and module upload per task: a converged run and a
# host's upgrade take well under half the time (docs/testing.md). `linear` is Ansible's own, for
# an operator who meets a module Mitogen runs differently (README: Dependencies).
STRATEGY_ENV = "INSTALLER_ANSIBLE_STRATEGY"
_STRATEGIES = {"mitogen": "mitogen_linear", "linear": "linear"}


def strategy_env(environ: Mapping[str, str]) -> dict[str, str]:
    """ANSIBLE_STRATEGY (and where Mitogen's plugin is) for the strategy the operator chose:
    `mitogen` unless INSTALLER_ANSIBLE_STRATEGY says `linear`."""
    chosen = environ.get(STRATEGY_ENV, "mitogen") or "mitogen"
    if chosen not in _STRATEGIES:
        raise AnsibleError(f"{STRATEGY_ENV}={chosen!r} is not a strategy this installer runs",
                           [f"set it to one of: {', '.join(_STRATEGIES)} (or unset it: mitogen)"])
    env = {"ANSIBLE_STRATEGY": _STRATEGIES[chosen]}
    if chosen == "mitogen":
        env["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")
    return env


def run_playbook(
    playbook: str,
    inventory_dir: Path,
    run_dir: Path,
    *,
    on_task: TaskEvent = lambda _h, _t, _s: None,
    check: bool = False,
    extra_cmdline: str = "",
    playbooks_dir: Path = PLAYBOOKS_DIR,
) -> PlaybookResult:
    """Run <playbooks_dir>/<playbook> against inventory_dir; artifacts (full log, events) go under
    run_dir. playbooks_dir is the repository's, or the copy inside a verified bundle."""
    hosts: dict[str, HostResult] = {}

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        status = _STATUS.get(event.get("event", ""))
        host = data.get("host")
        if status and host:
            res = data.get("res", {}) or {}
            hr = hosts.setdefault(host, HostResult(host))
            task = data.get("task", "")
            if status == "ok" and changed(event):
                status = "changed"
                hr.changed_tasks.append(task)
            if status in ("failed", "unreachable") and not data.get("ignore_errors"):
                hr.error = f"{task}: {_failure_text(res)}"
            if task == "Report the completion" and isinstance(res.get("msg"), dict):
                hr.facts["healthcheck"] = res["msg"]
            if task == "Report the GPU checks" and isinstance(res.get("msg"), dict):  # role gpu_verify
                hr.facts["gpu_verify"] = res["msg"].get("result") or {}
            on_task(host, task, status)
        return True  # keep the event in the artifacts

    cmdline = " ".join(x for x in ("--check --diff" if check else "", extra_cmdline) if x)
    private_dir(run_dir)
    envvars = {
        "ANSIBLE_CONFIG": str(playbooks_dir / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(playbooks_dir / "roles"),
        # The air-gap control namespace hides exactly this folder (lab/control_ns.py).
        "ANSIBLE_SSH_CONTROL_PATH_DIR": control_socket_dir(),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
        **strategy_env(os.environ),
    }
    pidfile = run_dir / PIDFILE
    pidfile.unlink(missing_ok=True)
    group = ChildGroup(pidfile)
    r = init_runner(
        private_data_dir=str(run_dir),
        project_dir=str(playbooks_dir),
        playbook=playbook,
        inventory=str(inventory_dir),
        envvars=envvars,
        cmdline=cmdline or None,
        event_handler=handle,
        # ours, not ansible-runner's default: that one swallows SIGTERM and SIGINT for good (the
        # installer would go on) and kills only ansible-playbook's group, not its workers
        cancel_callback=group.cancel,
        quiet=True,
        suppress_env_files=True,
    )
    # ansible-runner starts from a copy of this process's environment (cloud keys included) and
    # writes it into artifacts/<id>/command: give it only what Ansible needs, then drop that file.
    r.config.env = ansible_env(r.config.env, os.environ, ours={*envvars, *_RUNNER_SETS})
    r.config.command = die_with_parent_argv(r.config.command, pidfile)
    try:
        with group:
            r.run()
    finally:
        if r.config.artifact_dir:
            Path(r.config.artifact_dir, "command").unlink(missing_ok=True)
    stats = r.stats or {}
    for key, attr in (
        ("ok", "ok"), ("changed", "changed"), ("failures", "failed"),
        ("dark", "unreachable"), ("skipped", "skipped"), ("rescued", "rescued"),
    ):
        for host, n in (stats.get(key) or {}).items():
            setattr(hosts.setdefault(host, HostResult(host)), attr, n)
    artifacts = Path(r.config.artifact_dir) if r.config else run_dir
    return PlaybookResult(r.status, r.rc, hosts, artifacts)

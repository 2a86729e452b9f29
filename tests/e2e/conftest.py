"""One lab for the whole test run: booted once, shared by every end-to-end test, torn down at
the end with a check that nothing was left behind.

The tests use their own state directory and lab name/subnet, so a lab a user started from the
README keeps running undisturbed; the rootfs and bundle caches are shared on purpose.
"""

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import REPO, lab_frontend
from tests.support.e2e import Run, host_run, installer, latest_summary
from tests.support.lab_tenants import LabTenants
from tests.support.lab_tenants import setup as lab_tenants_setup

# Overridable so two test runs on one machine (say, a clean-clone CI check beside a developer's
# run) use different labs instead of colliding on names and addresses.
LAB_NAME = os.environ.get("PLI_E2E_LAB", "ci")
LAB_SUBNET = os.environ.get("PLI_E2E_SUBNET", "10.213.7.0/24")
# The shared lab's OS releases, one for all hosts or one per host (`installer lab up --releases`).
# debian-12,debian-13 deploys a mixed fleet; its trixie engine needs torch 2.13.0+cpu for CPython
# 3.13, from PyTorch's CPU index or a find-links folder (PIP_FIND_LINKS) that carries the wheel.
LAB_RELEASES = os.environ.get("PLI_E2E_RELEASES", "debian-12").split(",")


@pytest.fixture(scope="session")
def e2e_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("end-to-end tests need root (network namespaces, systemd-nspawn); run with sudo")
    state = REPO / ".installer" / f"e2e-{LAB_NAME}"
    state.mkdir(parents=True, exist_ok=True)
    os.environ["INSTALLER_STATE_DIR"] = str(state)
    return state


@pytest.fixture(scope="session")
def lab_hosts(e2e_state: Path):
    from installer import lab
    from installer.base.errors import LabError
    from installer.lab import state

    inventory = e2e_state / "lab.yml"
    if state.load(LAB_NAME) is None and lab.leftovers(name=LAB_NAME):
        lab.down(name=LAB_NAME)  # debris of a run that was killed: `lab up` would refuse it
    try:
        info = lab.up(2, name=LAB_NAME, subnet=LAB_SUBNET, inventory_path=inventory, releases=LAB_RELEASES)
    except LabError as exc:  # the details (failed units, journal, console) are the diagnosis
        details = [str(exc), *exc.details]
        try:
            lab.down(name=LAB_NAME)  # a failed run must not leave the next one a half-made lab
        except LabError as down_exc:  # reported after the boot failure, never instead of it
            details += [f"and lab down failed: {down_exc}", *down_exc.details]
        pytest.fail("\n".join(details), pytrace=False)
    yield info
    lab.down(name=LAB_NAME)
    assert lab.leftovers(name=LAB_NAME) == [], "lab down left things behind"


@pytest.fixture(scope="session")
def api_key(e2e_state: Path) -> str:
    """A user's API key, made with the real CLI before the first deploy sends its hash out."""
    # A name per run: the state folder (and its key store) outlives a run on a developer machine.
    proc = installer("keys", "create", "--name", f"e2e-{int(time.time())}", "--rpm", "1000")
    assert proc.returncode == 0, proc.stderr
    secret = next(line for line in proc.stdout.splitlines() if line.startswith("sk-pli-"))
    assert secret not in (e2e_state / "keys.json").read_text()  # only its hash is stored
    return secret


@pytest.fixture(scope="session")
def lab_tenants(lab_hosts, e2e_state: Path) -> LabTenants:
    """Two tenants (and a JWT issuer) in the lab inventory before the first deploy (#38)."""
    return lab_tenants_setup(lab_hosts.inventory_path, e2e_state)


@pytest.fixture(scope="session")
def lab_vip(lab_hosts) -> str:
    """The frontend's virtual IP (keepalived on both hosts) in the lab inventory before the first
    deploy (#37, tests/support/lab_frontend.py)."""
    return lab_frontend.setup(lab_hosts.inventory_path, LAB_SUBNET)


@pytest.fixture(scope="session")
def deployed(lab_hosts, e2e_state: Path, api_key: str, lab_tenants: LabTenants, lab_vip: str) -> Run:
    """The first `installer up` onto the fresh lab; every slow check shares this deployment."""
    start = time.monotonic()
    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    run = Run(proc, time.monotonic() - start, latest_summary(e2e_state, "up"))
    assert proc.returncode == 0, run.output[-4000:]
    return run


# The plain install runs first: its checks (first deploy, idempotent re-run) describe the lab as
# `installer up` left it, before the air-gap tests install other bundles onto the same hosts.
# The support archive follows monitoring: Prometheus has series to export by then, and it
# leaves the deployment as it found it (planted files removed, the stopped engine ready again).
# Usage runs on that same plain install too (its gateways count into Redis); it revokes the
# keys it made, so the deployment keeps the keys the later tests expect.
_FILE_ORDER = ("test_lab_lifecycle.py", "test_up.py", "test_monitoring.py", "test_doctor_collect.py", "test_usage.py")


_LAST = ("test_uninstall.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in _LAST:  # it removes the deployment every other test uses
            return len(_FILE_ORDER) + 1
        return _FILE_ORDER.index(name) if name in _FILE_ORDER else len(_FILE_ORDER)

    # Reorder the end-to-end tests among themselves only; sorted() is stable within a file.
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]
    for slot, item in zip(slots, sorted((items[i] for i in slots), key=rank), strict=True):
        items[slot] = item


# What the hosts' units said, attached to a failed test's report: CI keeps only pytest's output,
# not the run logs, and a failure like "Restart engine" is undiagnosable without it.
# The journal without the engines' access and throughput lines and the gateways' answered (2xx)
# requests, which would fill the window; the memory, and processes left stopped (a frozen engine that
# systemd could not kill in a container).
_JOURNAL = (
    "systemctl --no-pager --lines=0 status 'private-llm-*' 2>&1 | grep -E '●|Active:|Main PID:' ; "
    "free -m; ps -eo pid,stat,rss,args | awk '$2 ~ /^T/' | cut -c1-200; "
    "journalctl --no-pager -o short-monotonic -n 3000 -u 'private-llm-*' 2>&1 "
    "| grep -vE '\"(GET|POST) /|\"status\":2[0-9][0-9],|loggers.py' | tail -n 60 | cut -c1-300"
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    lab = getattr(item, "funcargs", {}).get("lab_hosts")
    if report.failed and call.when == "call" and lab is not None:
        for host in lab.hosts:
            try:
                text = host_run(lab, host, _JOURNAL)
            except (AssertionError, subprocess.SubprocessError) as exc:
                text = f"(could not read: {exc})"
            report.sections.append((f"units on {host.name}", text))
    return report

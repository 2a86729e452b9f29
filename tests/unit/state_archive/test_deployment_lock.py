"""One command at a time changes a deployment (installer/state/deployment_lock.py): a second `up` of the
same deployment, or a state export while it runs, is refused at once naming the holder, before
anything changes; other deployments, the same process and a killed holder never block."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from installer.state import deployment_lock
from installer.state.deployment_lock import DeploymentBusy


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _holder(state: Path, code: str) -> subprocess.Popen[str]:
    """Another installer process holding a lock until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import time\nfrom installer.state import deployment_lock\nwith {code}:\n"
         "    print('held', flush=True)\n    time.sleep(60)"],
        env={**os.environ, "INSTALLER_STATE_DIR": str(state)}, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_command_of_the_same_deployment_is_refused_naming_the_first(state: Path) -> None:
    proc = _holder(state, "deployment_lock.held('prod', 'up')")
    try:
        with pytest.raises(DeploymentBusy) as err, deployment_lock.held("prod", "upgrade"):
            pytest.fail("ran beside the up")
        assert "`installer up` (pid" in str(err.value) and f"pid {proc.pid}" in str(err.value)
        assert "`installer upgrade` was not started and nothing was changed" in str(err.value)
        with deployment_lock.held("staging", "up"):  # another deployment is not blocked
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with deployment_lock.held("prod", "upgrade"):  # the kernel dropped the killed holder's lock
        pass


def test_export_is_refused_while_a_command_runs_and_a_command_while_export_runs(state: Path) -> None:
    state.mkdir(parents=True)
    (state / "revisions").mkdir()
    proc = _holder(state, "deployment_lock.held('prod', 'release start')")
    try:
        with pytest.raises(DeploymentBusy) as err, deployment_lock.whole_state("state export"):
            pytest.fail("exported beside a release start")
        assert "`installer release start` (pid" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc = _holder(state, "deployment_lock.whole_state('state export')")
    try:
        with pytest.raises(DeploymentBusy) as err, deployment_lock.held("prod", "up"):
            pytest.fail("ran beside an export")
        assert "`installer state export` (pid" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_the_same_process_holds_its_locks_once(state: Path) -> None:
    with deployment_lock.held("prod", "release start"), deployment_lock.held("prod", "up"):
        time.sleep(0)  # a release start runs up's configure in the same process
    with deployment_lock.held("prod", "up"):
        pass


def test_an_empty_state_folder_gets_no_lock_file_from_an_import(state: Path) -> None:
    with deployment_lock.whole_state("state import"):
        assert not state.exists()  # import takes only an empty folder: a lock file would fill it


def test_installer_up_is_refused_before_it_starts(state: Path, tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text("deployment: prod\nmodel: {path: w, served_name: m}\nhosts: [{name: h1, address: 10.0.0.1}]\n"
                    "engine: {device: cpu}\n")
    proc = _holder(state, "deployment_lock.held('prod', 'up')")
    try:
        second = subprocess.run([sys.executable, "-m", "installer", "up", "-i", str(site)], capture_output=True,
                                text=True, env={**os.environ, "INSTALLER_STATE_DIR": str(state)}, timeout=120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert second.returncode == 1, second.stderr
    assert f"`installer up` (pid {proc.pid}" in second.stderr and "nothing was changed" in second.stderr
    assert "Traceback" not in second.stderr
    assert not (state / "runs").exists()  # refused before its run log


def test_a_key_change_waits_for_no_up_and_no_up_for_a_key_change(state: Path) -> None:
    # `up` renders the key store for its gateways and pushes it minutes later: a key revoked in
    # between would come back. The key store is every deployment's.
    proc = _holder(state, "deployment_lock.held('prod', 'up')")
    try:
        revoke = subprocess.run([sys.executable, "-m", "installer", "keys", "revoke", "someone"], capture_output=True,
                                text=True, env={**os.environ, "INSTALLER_STATE_DIR": str(state)}, timeout=120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert revoke.returncode == 1 and "no key was changed" in revoke.stderr, revoke.stderr
    proc = _holder(state, "deployment_lock.key_store('keys create')")
    try:
        with pytest.raises(DeploymentBusy) as err, deployment_lock.held("staging", "up"):
            pytest.fail("an up beside a key change")
        assert "`installer keys create` (pid" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

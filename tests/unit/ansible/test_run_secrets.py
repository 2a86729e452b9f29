"""Run folders keep no secret of the control machine's environment, and only its user reads them.

A real ansible-runner run of a tiny local playbook (it prints its whole environment, so a secret
that reached Ansible would be in stdout and the job events), through the installer's own
run_playbook into a RunLog folder; then every file of the run is searched for the planted values.
"""

import os
import stat
import sys
from pathlib import Path

import pytest

from installer.ansible.runner import ansible_env, run_playbook
from installer.base.paths import control_socket_dir
from installer.base.runlog import RunLog
from tests.support.roles import local_project

PLANTED = {
    "AWS_SECRET_ACCESS_KEY": "planted-aws-xyz",
    "AWS_SESSION_TOKEN": "planted-aws-session",
    "TENCENTCLOUD_SECRET_KEY": "planted-tencent",
    "JDCLOUD_SECRET_KEY": "planted-jd",
    "secret_key": "planted-jd-lower",
    "GITHUB_TOKEN": "planted-token",
    "DB_PASSWORD": "planted-password",
    "SOME_OPERATOR_SETTING": "planted-unlisted",  # not a secret by name: still not on the allow-list
}

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Read the environment Ansible runs with
      ansible.builtin.command: env
      register: __env
      changed_when: false
    - name: Print it
      ansible.builtin.debug:
        var: __env.stdout_lines
"""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LC_PLANTED_OK", "kept-locale")  # LC_* is on the allow-list
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def _project(tmp_path: Path) -> tuple[Path, Path]:
    return local_project(tmp_path, PLAY, "env.yml", "[defaults]\nstdout_callback = default\n")


def test_a_run_folder_holds_no_planted_secret_and_is_private(planted: Path) -> None:
    playbooks, inventory = _project(planted)
    log = RunLog("up", "secrets")
    pb = run_playbook("env.yml", inventory, log.dir / "ansible", playbooks_dir=playbooks)
    assert pb.success, pb.status

    files = [p for p in log.dir.rglob("*") if p.is_file()]
    stdout = next(p for p in files if p.name == "stdout").read_text()
    # The play ran and printed its environment: the search below looks where a secret would be.
    assert "kept-locale" in stdout and "ANSIBLE_CONFIG=" in stdout
    assert f"PATH={Path(sys.executable).parent}" in stdout
    for path in files:
        text = path.read_bytes()
        for name, value in PLANTED.items():
            assert value.encode() not in text, f"{name}'s value is in {path.relative_to(log.dir)}"
    assert not [p for p in files if p.name == "command"], "artifacts/<id>/command is kept"

    state = planted / "state"
    for folder in (state, state / "runs", log.dir, log.dir / "ansible"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_run_folders_are_private_under_a_permissive_umask(planted: Path) -> None:
    old = os.umask(0o002)
    try:
        (planted / "state" / "runs").mkdir(parents=True, mode=0o775)  # left by an older installer
        log = RunLog("up", "umask")
    finally:
        os.umask(old)
    for folder in (planted / "state", planted / "state" / "runs", log.dir):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_the_ansible_environment_keeps_what_ansible_and_ssh_need() -> None:
    inherited = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "AWS_ACCESS_KEY_ID": "AKIAPLANTED",
        "ANSIBLE_VAULT_PASSWORD_FILE": "/home/me/vault-pass",  # the operator's, not ours
        "EDITOR": "vi",
    }
    # As ansible-runner hands it over: the inherited copy plus its own and our settings.
    env = {**inherited, "ANSIBLE_CALLBACK_PLUGINS": "/runner/callbacks", "ANSIBLE_NOCOLOR": "True"}
    out = ansible_env(env, inherited)
    assert out["HOME"] == "/root" and out["SSH_AUTH_SOCK"] == "/tmp/agent.sock"
    assert out["LC_ALL"] == "C.UTF-8" and out["ANSIBLE_CALLBACK_PLUGINS"] == "/runner/callbacks"
    assert out["PATH"] == f"{Path(sys.executable).parent}:/usr/bin:/bin"
    assert not {"AWS_ACCESS_KEY_ID", "ANSIBLE_VAULT_PASSWORD_FILE", "EDITOR"} & set(out)


def test_settings_the_operator_already_exported_with_the_same_value_still_reach_ansible(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exported ANSIBLE_SSH_CONTROL_PATH_DIR equal to the installer's must not be dropped as
    "inherited": Ansible would fall back to ~/.ansible/cp, outside the folder the air-gap control
    namespace hides (lab/control_ns.py)."""
    playbooks, inventory = _project(planted)
    monkeypatch.setenv("ANSIBLE_SSH_CONTROL_PATH_DIR", control_socket_dir())
    monkeypatch.setenv("ANSIBLE_CONFIG", str(playbooks / "ansible.cfg"))
    log = RunLog("up", "exported")
    pb = run_playbook("env.yml", inventory, log.dir / "ansible", playbooks_dir=playbooks)
    assert pb.success, pb.status
    stdout = next(p for p in log.dir.rglob("stdout") if p.is_file()).read_text()
    assert f"ANSIBLE_SSH_CONTROL_PATH_DIR={control_socket_dir()}" in stdout
    assert f"ANSIBLE_CONFIG={playbooks / 'ansible.cfg'}" in stdout


def test_names_the_installer_sets_are_kept_whatever_the_inherited_value() -> None:
    inherited = {"PATH": "/bin", "ANSIBLE_SSH_CONTROL_PATH_DIR": "/tmp/cp", "ANSIBLE_CONFIG": "/p/a.cfg"}
    env = {**inherited, "ANSIBLE_NOCOLOR": "True"}
    out = ansible_env(env, inherited, ours={"ANSIBLE_SSH_CONTROL_PATH_DIR", "ANSIBLE_CONFIG", "ANSIBLE_NOCOLOR"})
    assert out["ANSIBLE_SSH_CONTROL_PATH_DIR"] == "/tmp/cp" and out["ANSIBLE_CONFIG"] == "/p/a.cfg"
    assert out["ANSIBLE_NOCOLOR"] == "True"
    # Without being named, an exported value equal to ours looks inherited and is not on the allow-list.
    assert "ANSIBLE_SSH_CONTROL_PATH_DIR" not in ansible_env(env, inherited)

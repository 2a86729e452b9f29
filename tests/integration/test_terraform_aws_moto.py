"""The AWS module for real: terraform init from the filesystem mirror (no network), then plan,
apply, outputs into the inventory, and destroy, against a moto EC2/VPC emulator on loopback.

Every AWS endpoint points at moto on 127.0.0.1; nothing else is contacted. moto is started
here and stopped by its PID.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.inventory import load_inventory
from installer.terraform import contract, provision
from installer.terraform.cli import Terraform
from tests.support.loopback import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MIRROR = Path("/opt/tf-plugins")
REPO = Path(__file__).resolve().parents[2]
if (
    shutil.which("terraform") is None
    or not (MIRROR / "registry.terraform.io/hashicorp/aws").is_dir()
):
    pytest.skip(
        "needs terraform and the hashicorp/aws mirror at /opt/tf-plugins", allow_module_level=True
    )
# moto[server] is a dev dependency: its absence is a broken environment, not a reason to skip.
assert importlib.util.find_spec("moto") is not None, "moto[server] (dev extra) is missing"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        import socket

        while time.monotonic() < deadline:
            assert proc.poll() is None, "moto_server exited at start"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture()
def aws_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": "test",  # moto accepts any; never real credentials
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
        "INSTALLER_STATE_DIR": str(tmp_path / "state"),
        "INSTALLER_TF_PLUGIN_MIRROR": str(MIRROR),
    }
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **env}


def _inventory(tmp_path: Path, endpoint: str) -> Path:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id_ed25519")],
        check=True,
    )
    path = tmp_path / "site.yml"
    path.write_text(f"""\
deployment: moto-demo
provider: aws
ssh: {{user: ubuntu, private_key: id_ed25519}}
model: {{path: weights, served_name: tiny}}
cloud:
  region: us-east-1
  zone: us-east-1a
  instance_type: g5.xlarge
  image: ami-12c6146b
  count: 2
  data_disks: [{{size_gb: 100}}]
  allowed_cidrs: [203.0.113.0/24]
  ssh_public_key: id_ed25519.pub
  endpoint: {endpoint}
""")
    return path


# moto's DescribeInstances does not echo an instance's VPC security groups, so Terraform sees
# them as drift and plans to re-add them in place; real EC2 reports them.
MOTO_DRIFT = {"vpc_security_group_ids"}


def _changed_attributes(tf: Terraform, plan_file: Path) -> set[str]:
    proc = subprocess.run(
        [tf.binary, f"-chdir={tf.workdir}", "show", "-json", str(plan_file)],
        capture_output=True,
        text=True,
        env=tf.env,
        check=True,
    )
    changed: set[str] = set()
    for rc in json.loads(proc.stdout).get("resource_changes", []):
        before, after = rc["change"]["before"] or {}, rc["change"]["after"] or {}
        changed |= {k for k in after if k in before and before[k] != after[k]}
    return changed


def _installer(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from installer.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )


def test_plan_up_outputs_down(moto_endpoint: str, aws_env: dict[str, str], tmp_path: Path) -> None:
    site = _inventory(tmp_path, moto_endpoint)

    # installer plan: Terraform's summary; the hosts do not exist yet, so no Ansible check.
    proc = _installer(aws_env, "plan", "-i", str(site))
    assert proc.returncode == 0, proc.stderr
    assert "terraform: 9 to add, 0 to change, 0 to destroy" in proc.stdout, proc.stdout
    assert "module.hosts.aws_instance.this[1]" in proc.stdout
    assert "2 new machine(s)" in proc.stdout

    # installer up's provision phase: apply, then the outputs become inventory hosts.
    notes: list[str] = []
    inv = provision.provision(load_inventory(site), note=notes.append)
    assert [h.name for h in inv.hosts] == ["moto-demo-1", "moto-demo-2"]
    assert all(h.ssh.user == "ubuntu" for h in inv.hosts)
    assert "terraform applied: 9 added, 0 changed, 0 gone" in notes, notes
    assert any("1 x NVIDIA A10G" in n for n in notes), notes
    workdir = tmp_path / "state" / "terraform" / "moto-demo"
    assert (workdir / "terraform.tfstate").is_file() and (
        workdir / "terraform.tfvars.json"
    ).is_file()
    known = (workdir / "known_hosts").read_text().splitlines()
    pinned = (workdir / "host-key" / "id_ed25519.pub").read_text().split()[1]
    assert inv.ssh.known_hosts == workdir / "known_hosts"
    assert [line.split()[0] for line in known] == [h.address for h in inv.hosts]
    assert all(line.split()[2] == pinned for line in known)

    # A second run changes nothing; --check reads the same hosts from the state.
    ws = provision.prepare(load_inventory(site))
    summary, plan_file = provision.plan(ws)
    assert (summary.add, summary.remove) == (0, 0), summary.changes
    assert _changed_attributes(ws.tf, plan_file) <= MOTO_DRIFT
    plan_file.unlink()
    checked = provision.provision(load_inventory(site), apply_changes=False)
    assert checked.hosts == inv.hosts

    # installer down --yes destroys everything it created.
    proc = _installer(aws_env, "down", "-i", str(site), "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "destroyed: 9 resource(s) of deployment moto-demo" in proc.stdout, proc.stdout
    assert contract.parse(provision.prepare(load_inventory(site)).tf.outputs()) == []

"""`monitoring.install_from: tarballs` for real: the monitoring role, run over SSH by Ansible on
one Debian 12 lab host of this test's own, installs Prometheus, Alertmanager and node_exporter
from upstream-layout release tarballs carried in a bundle folder built by
installer/bundle/monitoring_tarballs.py, and the services start and answer.

The tarballs are built here from the Debian packages' binaries on the control machine
(`.ci/setup` installs prometheus, prometheus-alertmanager and prometheus-node-exporter): upstream
release tarballs are <name>-<version>.linux-amd64/ holding exactly these Go programs (plus
LICENSE/NOTICE and, for Prometheus 2.x, example consoles the role does not use), so the role
sees what it would see in a real download. Two differences, both Debian's build and not the
role's business: Debian links against glibc where upstream's builds are static (the lab host is
Debian 12 and has that glibc), and Debian patches Alertmanager to read its notification
templates from /usr/share/prometheus/alertmanager/*.tmpl where upstream compiles them in, so the
test puts those two files there (without them this Debian binary exits at start). The host never
downloads anything (lab hosts have no route out).

One lab host, no deployment: about a minute. Lab name/subnet: PLI_MON_LAB / PLI_MON_SUBNET.
"""

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from installer.ansible import render
from installer.ansible.runner import run_playbook
from installer.base.paths import PLAYBOOKS_DIR
from installer.bundle import monitoring_tarballs
from installer.inventory import load_inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from tests.support.monitoring_tarballs import DEBIAN_AM_TEMPLATES, upstream_tarballs

pytestmark = pytest.mark.e2e
LAB = os.environ.get("PLI_MON_LAB", "montb")
SUBNET = os.environ.get("PLI_MON_SUBNET", "10.213.43.0/24")
BUNDLE_ON_HOST = "/var/lib/pli-monitoring-test/bundle"
def _ssh(info, host, command: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
         "-o", f"UserKnownHostsFile={info.known_hosts}", "-i", str(info.private_key),
         f"root@{host.address}", command],
        input=stdin, capture_output=True, timeout=120, check=False,
    )


@pytest.fixture(scope="module")
def lab_host(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from installer import lab

    state = tmp_path_factory.mktemp("state")
    old = os.environ.get("INSTALLER_STATE_DIR")
    os.environ["INSTALLER_STATE_DIR"] = str(state)
    try:
        info = lab.up(1, name=LAB, subnet=SUBNET, inventory_path=state / "lab.yml")
        try:
            yield info
        finally:
            lab.down(name=LAB)
    finally:
        if old is None:
            os.environ.pop("INSTALLER_STATE_DIR", None)
        else:
            os.environ["INSTALLER_STATE_DIR"] = old


def test_the_role_installs_and_runs_upstream_tarballs(lab_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    info, host = lab_host, lab_host.hosts[0]
    tarballs = tmp_path / "tarballs"
    tarballs.mkdir()
    versions = upstream_tarballs(tarballs)

    # The user's inventory; add_to_bundle checks the folder and each tarball's layout again.
    inv_path = tmp_path / "site.yml"
    doc = yaml.safe_load(info.inventory_path.read_text())
    doc["monitoring"].update({"install_from": "tarballs", "tarballs_dir": str(tarballs)})
    inv_path.write_text(yaml.safe_dump(doc))
    inv = load_inventory(inv_path)

    bundle = tmp_path / "bundle"
    assert monitoring_tarballs.add_to_bundle(inv, bundle) == {f"{c}-tarball": v for c, v in versions.items()}
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        tar.add(bundle / "monitoring", arcname="monitoring")
    push = _ssh(info, host, f"mkdir -p {BUNDLE_ON_HOST} && tar -C {BUNDLE_ON_HOST} -xf -", packed.getvalue())
    assert push.returncode == 0, push.stderr
    for template in sorted(DEBIAN_AM_TEMPLATES.glob("*.tmpl")):  # the module docstring says why
        put = _ssh(info, host, f"mkdir -p {template.parent} && cat > {template}", template.read_bytes())
        assert put.returncode == 0, put.stderr

    # The installer's own Ansible inventory for these hosts, and the variables the role reads.
    inventory_dir = tmp_path / "ansible"
    (inventory_dir / "group_vars").mkdir(parents=True)
    dp = deployment_plan.build(inv)
    secret_files.prepare(dp)  # as the flows do before rendering
    (inventory_dir / "hosts.yml").write_text(yaml.safe_dump(render.hosts_yaml(dp)))
    group_vars = {
        **HOST_LAYOUT, **render._monitoring_vars(dp), "pli_deployment": inv.deployment,
        "pli_bundle_dir": BUNDLE_ON_HOST, "engine_device": "cpu", "gateway_port": inv.ports.gateway,
        "pli_metrics_token_src": str(secret_files.metrics_token_file(inv.deployment)),
    }
    (inventory_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    assert group_vars["monitoring_install_from"] == "tarballs"
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    shutil.copy2(PLAYBOOKS_DIR / "ansible.cfg", playbooks / "ansible.cfg")
    (playbooks / "roles").symlink_to(PLAYBOOKS_DIR / "roles")
    (playbooks / "monitoring.yml").write_text(
        "- hosts: all\n  become: true\n  gather_facts: false\n  roles: [monitoring]\n"
    )

    first = run_playbook("monitoring.yml", inventory_dir, tmp_path / "run1", playbooks_dir=playbooks)
    assert first.rc == 0, (first.hosts, (first.artifacts / "stdout").read_text()[-6000:])

    prom = f"http://{host.address}:9090"
    with urllib.request.urlopen(f"{prom}/-/ready", timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"http://{host.address}:9100/metrics", timeout=10) as resp:
        node = resp.read().decode()
    assert 'node_exporter_build_info{branch="' in node and f'version="{versions["node_exporter"]}' in node
    # Alertmanager listens on the host's loopback only (its own /-/ready).
    am = _ssh(info, host, "python3 -c \"import urllib.request as u; "
              "print(u.urlopen('http://127.0.0.1:9093/-/ready', timeout=10).status)\"")
    assert am.returncode == 0 and am.stdout.decode().strip() == "200", am.stderr

    # Each service runs the tarball's program from its versioned folder, as user prometheus, under
    # a unit of ours (private-llm-*: `installer uninstall` finds those), and no Debian package of
    # theirs is on the host.
    for unit, component, program in (("private-llm-prometheus", "prometheus", "prometheus"),
                                     ("private-llm-alertmanager", "alertmanager", "alertmanager"),
                                     ("private-llm-node-exporter", "node_exporter", "node_exporter")):
        shown = _ssh(info, host, f"systemctl show -p ExecStart -p User -p ActiveState -p NoNewPrivileges {unit}")
        text = shown.stdout.decode()
        folder = f"/opt/private-llm/monitoring/{component}-{versions[component]}.linux-amd64/{program}"
        assert f"path={folder} " in text and "User=prometheus" in text, text
        assert "ActiveState=active" in text and "NoNewPrivileges=yes" in text, text
    dpkg = _ssh(info, host, "dpkg-query -W prometheus prometheus-alertmanager prometheus-node-exporter")
    assert dpkg.returncode != 0 and b"no packages found" in dpkg.stderr.lower(), dpkg

    # Prometheus from the tarball scrapes node_exporter from the tarball, with the role's labels.
    def node_up() -> list:
        url = f"{prom}/api/v1/query?query=up%7Bjob%3D%22node%22%7D"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return [r for r in json.load(resp)["data"]["result"] if r["value"][1] == "1"]

    deadline = time.monotonic() + 60
    while not (up := node_up()) and time.monotonic() < deadline:
        time.sleep(2)
    assert up and up[0]["metric"]["host"] == host.name, up

    # Rules loaded: the role's configuration, checked on the host by the tarball's promtool.
    with urllib.request.urlopen(f"{prom}/api/v1/rules", timeout=10) as resp:
        names = {r["name"] for g in json.load(resp)["data"]["groups"] for r in g["rules"]}
    assert {"PLIEngineDown", "PLIDiskAlmostFull"} <= names

    second = run_playbook("monitoring.yml", inventory_dir, tmp_path / "run2", playbooks_dir=playbooks)
    assert second.rc == 0
    assert second.hosts[host.name].changed == 0, second.hosts[host.name].changed_tasks

    # Uninstall (what `installer down` runs on bare metal): no package owns what the tarball
    # install made, so the uninstall role removes it itself — nothing may be left.
    (playbooks / "uninstall.yml").symlink_to(PLAYBOOKS_DIR / "uninstall.yml")
    gone = run_playbook("uninstall.yml", inventory_dir, tmp_path / "run3", playbooks_dir=playbooks)
    assert gone.rc == 0, (gone.artifacts / "stdout").read_text()[-4000:]
    left = _ssh(info, host, "ls -d /opt/private-llm /etc/prometheus /var/lib/prometheus /etc/default/prometheus*"
                " 2>/dev/null; getent passwd prometheus; systemctl list-unit-files 'private-llm-*' --no-legend")
    assert left.stdout.decode().strip() == "", left.stdout.decode()

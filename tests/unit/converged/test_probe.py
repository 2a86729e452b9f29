"""The host-side probe (installer/converged/probe.py), run the way SSH runs it (`python3 -`, the
script on stdin), on a folder that stands in for a host; and the digests of Ansible's inputs."""

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from installer.converged import fast_path as converged


def _probe(spec: dict) -> dict[str, str]:
    p = subprocess.run(
        [sys.executable, "-", json.dumps(spec)], input=converged.PROBE_SCRIPT.read_bytes(),
        capture_output=True, check=True,
    )
    return json.loads(p.stdout)["entries"]


def _host(root: Path) -> dict:
    (root / "etc").mkdir()
    (root / "etc" / "gateway.yml").write_text("port: 8080\n")
    (root / "etc" / "gateway.yml").chmod(0o640)
    (root / "releases" / "r-1" / "venv").mkdir(parents=True)
    (root / "releases" / "r-1" / "venv" / "mod.py").write_text("x = 1\n")
    (root / "current").symlink_to(root / "releases" / "r-1")
    return {
        "trees": [str(root / "etc")], "files": [str(root / "current"), str(root / "absent.conf")],
        "stat_trees": [str(root / "releases" / "*")], "listings": [str(root / "releases")],
    }


def test_an_unchanged_host_probes_the_same(tmp_path: Path) -> None:
    spec = _host(tmp_path)
    first = _probe(spec)
    assert first[f"file:{tmp_path}/absent.conf"] == "absent"
    assert first[f"file:{tmp_path}/current"] == f"link -> {tmp_path}/releases/r-1"
    assert first[f"file:{tmp_path}/etc/gateway.yml"].endswith(f"mode=0640 owner={os.getuid()}:{os.getgid()}")
    assert converged.compare(first, _probe(spec)) == []


def test_every_kind_of_change_shows(tmp_path: Path) -> None:
    spec = _host(tmp_path)
    before = _probe(spec)
    (tmp_path / "etc" / "gateway.yml").write_text("port: 9090\n")
    (tmp_path / "etc" / "gateway.yml").chmod(0o644)
    (tmp_path / "etc" / "extra.json").write_text("{}")
    (tmp_path / "releases" / "r-1" / "venv" / "mod.py").write_text("x = 2\n")
    (tmp_path / "releases" / "r-0").mkdir()
    (tmp_path / "current").unlink()
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "r-0")
    (tmp_path / "absent.conf").write_text("")
    said = "\n".join(converged.compare(before, _probe(spec)))
    assert f"{tmp_path}/etc/gateway.yml: content changed, mode 0640 -> 0644" in said
    assert f"{tmp_path}/etc/extra.json: new (file)" in said
    assert f"{tmp_path}/releases/r-1: files changed under it" in said
    assert f"{tmp_path}/current: link -> {tmp_path}/releases/r-1 became link -> {tmp_path}/releases/r-0" in said
    assert f"{tmp_path}/absent.conf: appeared (file)" in said
    assert f"{tmp_path}/releases (listing)" in said
    assert f"{tmp_path}/releases/r-0: new (tree)" in said


def _rendered(tmp_path: Path, cert: Path) -> Path:
    inv_dir = tmp_path / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True)
    hosts = {"all": {"hosts": {"a": {"tls_cert_src": str(cert), "common_packages": [{"name": "redis-server"}]}}}}
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump({"gateway_port": 8080}))
    return inv_dir


class _Man:
    bundle_id = "b" * 64
    release_id = "r-1"


def test_inputs_follow_the_files_the_roles_copy(tmp_path: Path) -> None:
    cert = tmp_path / "server.pem"
    cert.write_text("one")
    playbooks = tmp_path / "playbooks"
    (playbooks / "roles").mkdir(parents=True)
    (playbooks / "site.yml").write_text("- hosts: all\n")
    inv_dir = _rendered(tmp_path, cert)
    before = converged.inputs(inv_dir, _Man(), playbooks)  # type: ignore[arg-type]
    assert converged.host_packages(inv_dir) == {"a": ["redis-server"]}
    cert.write_text("renewed")  # same path in the variables, new content on the host
    (playbooks / "site.yml").write_text("- hosts: serving\n")
    after = converged.inputs(inv_dir, _Man(), playbooks)  # type: ignore[arg-type]
    assert converged.compare_inputs(before["a"], after["a"]) == ["files the roles copy", "playbooks"]


def test_the_keys_are_named_apart_from_the_other_variables(tmp_path: Path) -> None:
    inv_dir, playbooks = _rendered(tmp_path, tmp_path / "absent.pem"), tmp_path / "playbooks"
    playbooks.mkdir()
    all_yml = inv_dir / "group_vars" / "all.yml"
    all_yml.write_text(yaml.safe_dump({"gateway_port": 8080, "gateway_keys_json": "{}"}))
    before = converged.inputs(inv_dir, _Man(), playbooks)  # type: ignore[arg-type]
    assert before["a"]["keys"] == hashlib.sha256(b"{}").hexdigest()  # what records before #34 hold
    all_yml.write_text(yaml.safe_dump({"gateway_port": 8080, "gateway_keys_json": '{"k": 1}'}))
    after = converged.inputs(inv_dir, _Man(), playbooks)  # type: ignore[arg-type]
    assert converged.compare_inputs(before["a"], after["a"]) == ["keys", "variables"]


def test_the_gpu_roles_files_are_where_the_roles_write_them() -> None:
    roles = Path(__file__).parents[3] / "playbooks" / "roles"
    repo = (roles / "nvidia_driver" / "tasks" / "repo.yml").read_text()
    install = (roles / "nvidia_driver" / "tasks" / "install.yml").read_text()
    assert '_nvidia_driver_apt_dir: "{{ pli_state_dir }}/apt-gpu"' in repo
    assert 'dest: "{{ _nvidia_driver_apt_dir }}/sources.list"' in repo
    assert 'dest: "{{ _nvidia_driver_apt_dir }}/preferences.d/nvidia-driver"' in install
    spec = converged.spec([])
    assert "/var/lib/private-llm/apt-gpu/sources.list" in spec["files"]
    assert "/var/lib/private-llm/apt-gpu/preferences.d" in spec["trees"]
    assert not any(p.startswith("/etc/apt/") for p in spec["files"] + spec["trees"])


def test_the_probe_sees_kernel_driver_holds_groups_and_patterned_packages() -> None:
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    found = _probe({"users": [user], "package_patterns": ["bas[h]", "no-such-package-*"]})
    assert found["host:kernel"] == os.uname().release
    assert found["host:nvidia driver"] == (
        " ".join(Path("/proc/driver/nvidia/version").read_text().split())
        if Path("/proc/driver/nvidia/version").exists() else "absent")
    assert found[f"groups:{user}"] == " ".join(
        subprocess.run(["id", "-nG", user], capture_output=True, text=True, check=True).stdout.split())
    assert "host:apt holds" in found
    assert found["package:bash"].split()[1:] in (["ii", "install"], ["hi", "hold"])
    assert not any(k.startswith("package:no-such") for k in found)
    # a hold released by hand is drift, named
    released = {**found, "package:bash": found["package:bash"].replace("hold", "install")}
    held = {**found, "package:bash": found["package:bash"].replace("install", "hold")}
    assert converged.compare(held, released) == [
        f"bash (package): {held['package:bash']!r} became {released['package:bash']!r}"]


def test_gpu_packages_are_probed_by_pattern_on_every_host() -> None:
    patterns = converged.spec([])["package_patterns"]
    for name in ("nvidia-driver-580-server-open", "libnvidia-compute-580-server", "cuda-toolkit-13-0",
                 "libnccl2", "libnccl-dev", "nvidia-fabricmanager-580", "datacenter-gpu-manager-exporter"):
        assert any(fnmatch.fnmatchcase(name, p) for p in patterns), name


def test_weights_are_described_by_stat_and_never_read(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    weights = models / "m" / "model.safetensors"
    weights.write_bytes(b"w" * 4096)
    spec = converged.spec([])
    assert "/var/lib/private-llm/models" in spec["stat_file_trees"]
    assert not any(t.endswith("/models") for t in spec["trees"])  # no longer hashed
    ours = {"stat_file_trees": [str(models)]}
    before = _probe(ours)
    assert before[f"stat:{weights}"].startswith("file size=4096 mtime=")
    assert "sha256" not in before[f"stat:{weights}"]
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    [said] = converged.compare(before, _probe(ours))
    assert said.startswith(f"{weights}: mtime ")
    weights.write_bytes(b"x" * 10)
    assert f"{weights}: size 4096 -> 10" in converged.compare(before, _probe(ours))[0]


def test_every_model_folder_and_a_canarys_are_in_the_record(tmp_path: Path) -> None:
    """Several models: the record describes each served folder (and a canary's) file by file,
    so drift in any of them, a folder gone, or one that appears sends `up` to Ansible."""
    models = tmp_path / "models"
    for folder in ("tiny-chat", "tiny-chat.canary", "org--tiny-embed"):
        (models / folder).mkdir(parents=True)
        (models / folder / "model.safetensors").write_bytes(folder.encode())
    ours = {"stat_file_trees": [str(models)]}
    before = _probe(ours)
    for folder in ("tiny-chat", "tiny-chat.canary", "org--tiny-embed"):
        assert before[f"stat:{models / folder / 'model.safetensors'}"].startswith("file size=")
    (models / "org--tiny-embed" / "model.safetensors").write_bytes(b"edited by hand")
    (models / "tiny-chat.canary" / "model.safetensors").unlink()
    (models / "tiny-chat.canary").rmdir()
    (models / "tiny-rerank").mkdir()
    said = converged.compare(before, _probe(ours))
    assert any(d.startswith(f"{models}/org--tiny-embed/model.safetensors: size 15 -> 14") for d in said)
    assert f"{models}/tiny-chat.canary/model.safetensors: missing (stat)" in said
    assert f"{models}/tiny-rerank: new (stat), not there after the last full configure" in said
    assert not [d for d in said if d.startswith(f"{models}/tiny-chat/")]


def _edit_in_place_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """What `touch -r` after an edit leaves: same inode, same size, the old mtime back."""
    before = path.stat()
    assert len(data) == before.st_size
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_weights_file_edited_with_its_size_and_mtime_kept_is_drift(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    weights = models / "m" / "model.safetensors"
    weights.write_bytes(b"w" * 4096)
    ours = {"stat_file_trees": [str(models)]}
    before = _probe(ours)
    _edit_in_place_keeping_size_and_mtime(weights, b"x" * 4096)
    [said] = converged.compare(before, _probe(ours))
    assert said.startswith(f"{weights}: ctime ")


def test_a_venv_file_edited_with_its_size_and_mtime_kept_is_drift(tmp_path: Path) -> None:
    spec = _host(tmp_path)
    before = _probe(spec)
    _edit_in_place_keeping_size_and_mtime(tmp_path / "releases" / "r-1" / "venv" / "mod.py", b"x = 9\n")
    [said] = converged.compare(before, _probe(spec))
    assert said.startswith(f"{tmp_path}/releases/r-1: files changed under it")


def test_reading_the_weights_and_the_venv_is_no_drift(tmp_path: Path) -> None:
    """An engine reads its weights and imports from its venv between two `up`s: neither moves
    the ctime the record keeps."""
    spec = {**_host(tmp_path), "stat_file_trees": [str(tmp_path / "models")]}
    (tmp_path / "models").mkdir()
    weights = tmp_path / "models" / "model.safetensors"
    weights.write_bytes(b"w" * 4096)
    before = _probe(spec)
    for path in (weights, tmp_path / "releases" / "r-1" / "venv" / "mod.py"):
        path.read_bytes()
    assert converged.compare(before, _probe(spec)) == []

"""The model role for real (ansible-playbook, connection local, two hosts with a state folder
each): every model lands only on the hosts that serve it, verified against its bundle list; a
model that leaves a host, and a canary's weights after its release, are removed (only folders
the role installed, listed in models/.installed.json), and nothing else under models/ is touched;
files a new checkpoint no longer has go too."""

import sys
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from installer.bundle import weights
from installer.bundle.manifest import Manifest, scan
from tests.support import REPO

PRIMARY = "tiny-chat"
CHAT = {"config.json": b'{"chat": 1}', "model.safetensors": b"chat weights"}
EMBED = {"config.json": b'{"embed": 1}', "model.safetensors": b"embed weights"}
RERANK = {"config.json": b'{"rerank": 1}', "model-00001-of-00002.safetensors": b"r1",
          "model-00002-of-00002.safetensors": b"r2"}
RERANK_V2 = {"config.json": b'{"rerank": 2}', "model.safetensors": b"rerank weights, one shard"}
CANARY = {"config.json": b'{"chat": 2}', "model.safetensors": b"chat weights v2"}


def _bundle(root: Path, folders: dict[str, dict[str, bytes]]) -> Path:
    """A bundle's weights laid out by the build's rule (weights.py), with their sha256sum lists."""
    for folder, files in folders.items():
        for name, data in files.items():
            path = root / weights.bundle_dir(folder, PRIMARY) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    man = Manifest({}, {}, [], scan(root))
    for folder in folders:
        (root / weights.checksums_file(folder, PRIMARY)).write_text(
            man.checksums_text(prefix=weights.bundle_dir(folder, PRIMARY) + "/")
        )
    return root


def _entry(name: str, served: str, folder: str, hosts: list[str], task: str = "generate") -> dict[str, Any]:
    return {"name": name, "served_name": served, "dir_name": folder, "task": task, "hosts": hosts}


THREE = [
    _entry("chat", PRIMARY, PRIMARY, ["h1", "h2"]),
    _entry("emb", "org/tiny-embed", "org--tiny-embed", ["h1"], "embed"),
    _entry("rank", "tiny-rerank", "tiny-rerank", ["h2"], "score"),
]


Run = tuple[int, dict[str, int], list[tuple[str, str]], str]


def _run(tmp: Path, bundle: Path, models: list[dict[str, Any]], host_vars: str = "") -> Run:
    """Run the role on h1 and h2; (rc, changed tasks per host, (host, handler) restarts, output).
    `host_vars`: more of each host's variables, `{host}` standing for its name."""
    project = tmp / "project"
    project.mkdir(exist_ok=True)
    (tmp / "runner").mkdir(exist_ok=True)
    (project / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False, "roles": ["model"],
        # the engine role listens for this in a real run
        "handlers": [{"name": "Engine restart", "listen": "private-llm model changed",
                      "ansible.builtin.debug": {"msg": "restart"}}],
        "post_tasks": [{"name": "Keep the changed folders", "ansible.builtin.copy": {
            "content": "{{ model_changed_dirs | to_json }}", "dest": "{{ pli_state_dir }}/changed.json"}}],
    }]))
    hosts = "\n".join(
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable} pli_state_dir={tmp / h}"
        + (" " + host_vars.format(host=h) if host_vars else "")
        for h in ("h1", "h2")
    )
    restarts: list[tuple[str, str]] = []

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == "Engine restart":
            restarts.append((data["host"], data["task"]))
        return True

    r = ansible_runner.run(
        private_data_dir=str(tmp / "runner"), project_dir=str(project), playbook="play.yml",
        inventory=hosts + "\n",
        extravars={"pli_bundle_dir": str(bundle), "models": models, "model_dir_name": PRIMARY},
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "True",
                 "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        event_handler=handle, quiet=True, suppress_env_files=True,
    )
    changed = {h: n for h, n in (r.stats or {}).get("changed", {}).items()}
    return r.rc, changed, restarts, r.stdout.read()[-4000:]


def _tree(state: Path) -> dict[str, dict[str, bytes]]:
    models = state / "models"
    return {
        d.name: {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.is_file()}
        for d in sorted(models.iterdir()) if d.is_dir()
    }


def _changed(state: Path) -> list[str]:
    return yaml.safe_load((state / "changed.json").read_text())


def test_each_model_lands_only_where_served_and_a_departed_one_is_removed(tmp_path: Path) -> None:
    h1, h2 = tmp_path / "h1", tmp_path / "h2"
    for state in (h1, h2):
        # not the role's: a hidden folder, a folder no served name makes, an operator's folder
        # whose name a served name could have, and a file
        for other in (".partial", "lost+found", "backup"):
            (state / "models" / other).mkdir(parents=True)
        (state / "models" / "backup" / "model.safetensors").write_bytes(b"the operator's copy")
        (state / "models" / "README").write_text("operator's notes")
    kept = {".partial": {}, "lost+found": {}, "backup": {"model.safetensors": b"the operator's copy"}}
    one = _bundle(tmp_path / "bundle-1", {PRIMARY: CHAT, f"{PRIMARY}.canary": CANARY,
                                          "org--tiny-embed": EMBED, "tiny-rerank": RERANK})
    # a release of the chat model runs its canary, with weights of its own, on h2
    canary = _entry("chat", PRIMARY, f"{PRIMARY}.canary", ["h2"])

    rc, changed, restarts, out = _run(tmp_path, one, [*THREE, canary])
    assert rc == 0, out
    assert _tree(h1) == {PRIMARY: CHAT, "org--tiny-embed": EMBED, **kept}
    assert _tree(h2) == {PRIMARY: CHAT, f"{PRIMARY}.canary": CANARY, "tiny-rerank": RERANK, **kept}
    assert _changed(h1) == ["org--tiny-embed", PRIMARY]
    assert _changed(h2) == [PRIMARY, f"{PRIMARY}.canary", "tiny-rerank"]
    assert sorted(h for h, _ in restarts) == ["h1", "h2"]
    # the role keeps the folders it installed, the only ones its cleanup may remove
    installed = h1 / "models" / ".installed.json"
    assert yaml.safe_load(installed.read_text()) == ["org--tiny-embed", PRIMARY]
    assert installed.stat().st_mode & 0o777 == 0o644

    rc, changed, restarts, out = _run(tmp_path, one, [*THREE, canary])  # again: nothing to do
    assert rc == 0, out
    assert (_changed(h1), _changed(h2), restarts) == ([], [], [])
    assert changed == {"h1": 1, "h2": 1}  # the test's own post task only

    # The embedding model leaves the plan; the canary moves to h1 (it leaves h2's); the
    # reranker's new checkpoint has other file names.
    two = _bundle(tmp_path / "bundle-2", {PRIMARY: CHAT, f"{PRIMARY}.canary": CANARY, "tiny-rerank": RERANK_V2})
    canary = _entry("chat", PRIMARY, f"{PRIMARY}.canary", ["h1"])
    rc, _changed_tasks, restarts, out = _run(tmp_path, two, [THREE[0], canary, THREE[2]])
    assert rc == 0, out
    assert _tree(h1) == {PRIMARY: CHAT, f"{PRIMARY}.canary": CANARY, **kept}
    assert _tree(h2) == {PRIMARY: CHAT, "tiny-rerank": RERANK_V2, **kept}
    assert (_changed(h1), _changed(h2)) == ([f"{PRIMARY}.canary"], ["tiny-rerank"])
    assert (h1 / "models" / "README").read_text() == "operator's notes"
    assert yaml.safe_load(installed.read_text()) == [PRIMARY, f"{PRIMARY}.canary"]
    assert yaml.safe_load((h2 / "models" / ".installed.json").read_text()) == [PRIMARY, "tiny-rerank"]


def test_a_folder_name_that_is_not_one_folder_is_refused_before_any_copy(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "bundle", {PRIMARY: CHAT})
    rc, _changed_tasks, _restarts, out = _run(tmp_path, bundle, [THREE[0], _entry("x", "x", "../../etc", ["h1"])])
    assert rc != 0
    assert "must name each folder once" in out and "../../etc" in out
    assert not (tmp_path / "h1" / "models").exists()


def test_a_bundle_without_a_served_folder_changes_nothing_on_that_host(tmp_path: Path) -> None:
    """A release's bundle built without its canary: h1, which would run the canary, keeps its
    weights as they are; h2, which serves only stable, is configured."""
    bundle = _bundle(tmp_path / "bundle", {PRIMARY: CHAT})
    canary = _entry("chat", PRIMARY, f"{PRIMARY}.canary", ["h1"])
    rc, _changed_tasks, _restarts, out = _run(tmp_path, bundle, [THREE[0], canary])
    assert rc != 0
    assert f"carries no weights for {PRIMARY}.canary" in out
    assert not (tmp_path / "h1" / "models").exists()
    assert _tree(tmp_path / "h2") == {PRIMARY: CHAT}


def test_weights_on_the_hosts_are_verified_in_place_and_a_flipped_byte_names_host_and_file(tmp_path: Path) -> None:
    """model.source hosts: (docs/weights.md): no weights in the bundle, their signed list in its
    manifest.json; each host's own copy (here {host}-weights, the same path on real hosts) is
    verified, then linked where the engines read it; one byte flipped on h2 stops h2 alone."""
    import json
    import os

    from installer.weights import verify as weights_verify

    for host in ("h1", "h2"):
        for name, data in CHAT.items():
            (tmp_path / f"{host}-weights" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f"{host}-weights" / name).write_bytes(data)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    listed = {PRIMARY: {"source": {"hosts": "/data/x"}, "size": 0,
                        "files": weights_verify.describe(str(tmp_path / "h1-weights"))}}
    (bundle / "manifest.json").write_text(Manifest({}, {weights.BY_REFERENCE: listed}, [], []).to_json())
    model = {**_entry("chat", PRIMARY, PRIMARY, ["h1", "h2"]), "source": {"hosts": "{{ weights_root }}"}}
    where = f"weights_root={tmp_path}/{{host}}-weights"

    rc, _changed_tasks, restarts, out = _run(tmp_path, bundle, [model], where)
    assert rc == 0, out
    for host in ("h1", "h2"):
        link = tmp_path / host / "models" / PRIMARY
        assert link.is_symlink() and os.readlink(link) == str(tmp_path / f"{host}-weights")
        assert _changed(tmp_path / host) == [PRIMARY]
        cache = tmp_path / host / "weights" / "cache" / f"{PRIMARY}.json"
        assert cache.stat().st_mode & 0o777 == 0o600
    assert sorted(h for h, _ in restarts) == ["h1", "h2"]

    rc, _changed_tasks, restarts, out = _run(tmp_path, bundle, [model], where)  # again: nothing to do
    assert (rc, restarts, _changed(tmp_path / "h1")) == (0, [], []), out

    shard = tmp_path / "h2-weights" / "model.safetensors"
    st = shard.stat()
    shard.write_bytes(b"C" + shard.read_bytes()[1:])
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # the size and mtime kept
    (tmp_path / "h1-weights" / "notes.txt").write_text("an extra file")
    rc, _changed_tasks, _restarts, out = _run(tmp_path, bundle, [model], where)
    assert rc != 0
    flat = " ".join(out.split())
    assert "h2: refused" in flat and "model.safetensors: sha256 differs from the signed manifest" in flat, out
    assert "h1: refused" in flat and "notes.txt: not in the signed manifest (an extra file)" in flat, out
    assert json.loads((tmp_path / "h2-weights" / "config.json").read_text()) == {"chat": 1}  # never changed

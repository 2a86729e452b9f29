"""Several models in one bundle: the primary at model/ (as bundles made before), every other one
at models/<folder>/ with its sha256sum list, a canary with its own weights at <folder>.canary;
the cache key follows every model, and weights never change the release id.

The build runs for real (weights linked, every file hashed, the SBOM written, the manifest made)
on the tiny chat model of installer/modelmaker.py; only the wheel downloads are stand-ins (small
real wheels), as no index is reachable here.
"""

import dataclasses
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import build, contents, manifest, planning, project_wheel, wheels
from installer.bundle.manifest import SBOM, Manifest, verify
from installer.inventory import load_inventory
from installer.modelmaker import make_tiny_model
from installer.preparation import prepare
from tests.support.bundles import make_bundle


def _whl(dest: Path, name: str, version: str, uv: bool = False) -> Path:
    path = dest / f"{name}-{version}-py3-none-any.whl"
    members = {f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
    if uv:
        members[f"{name}-{version}.data/scripts/uv"] = "#!/bin/sh\necho uv\n"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in members.items():  # a fixed date: the same wheel is the same bytes
            zf.writestr(zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0)), text)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "chat")


@pytest.fixture
def site(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    for name in ("chat", "embed", "rerank"):  # the tiny chat model three times, each its own copy
        shutil.copytree(tiny, tmp_path / "models" / name)
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setattr(planning, "gateway_requirements", lambda: ["fastapi>=0.100"])
    monkeypatch.setattr(project_wheel, "build", lambda dest: _whl(dest, "private_llm_installer", "0.1.0"))
    monkeypatch.setattr(wheels, "for_target", lambda reqs, **_kw: [_whl(index, "vllm", "0.26.0")])
    monkeypatch.setattr(wheels, "download_wheels", lambda reqs, **_kw: [_whl(index, "uv", "0.13.9", uv=True)])
    monkeypatch.setattr(build, "_os_packages", lambda contents, root: [])  # no apt archive here
    return tmp_path


def _inventory(site: Path, models: str) -> Path:
    path = site / "inventory.yml"
    path.write_text(f"""deployment: multi
hosts:
  - {{name: h1, address: 10.0.0.1}}
  - {{name: h2, address: 10.0.0.2}}
engine: {{device: cpu}}
models:
{models}""")
    return path


THREE = """  - {name: chat, served_name: tiny-chat, path: ./models/chat}
  - {name: emb, served_name: org/tiny-embed, path: ./models/embed, task: embed, hosts: [h1]}
  - {name: rank, served_name: tiny-rerank, path: ./models/rerank, task: score, hosts: [h2]}
"""


def _sums(root: Path, rel: str) -> dict[str, str]:
    return {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in (root / rel).read_text().splitlines()}


def test_three_models_travel_each_in_its_folder_with_its_checksums(site: Path) -> None:
    inv = load_inventory(_inventory(site, THREE))
    root, man, built = build.build(inv)
    assert built
    weights_files = sorted(p.name for p in (site / "models" / "chat").iterdir())
    # the primary where bundles made before put it; the others under models/<their host folder>
    for folder in ("model", "models/org--tiny-embed", "models/tiny-rerank"):
        assert sorted(p.name for p in (root / folder).iterdir()) == weights_files
    assert not (root / "models" / "tiny-chat").exists()
    listed = {f.path: f.sha256 for f in man.files}
    for folder, sums in (("model", "model.sha256"), ("models/org--tiny-embed", "models/org--tiny-embed.sha256"),
                         ("models/tiny-rerank", "models/tiny-rerank.sha256")):
        assert _sums(root, sums) == {n: listed[f"{folder}/{n}"] for n in weights_files}
        assert sums in listed  # signed with the rest
        check = subprocess.run(["sha256sum", "--quiet", "--strict", "-c", root / sums], cwd=root / folder, check=False)
        assert check.returncode == 0
    assert man.components["model"]["name"] == "tiny-chat"
    assert man.components["models"] == {
        "org--tiny-embed": {"key": "emb", "name": "org/tiny-embed", "size": man.components["model"]["size"]},
        "tiny-rerank": {"key": "rank", "name": "tiny-rerank", "size": man.components["model"]["size"]},
    }
    verify(root)
    # `bundle inspect` and `diff` name each model
    models = {g.component.name: len(g.files) for g in contents.by_component(man) if g.component.kind == "model"}
    assert models == {n: len(weights_files) + 1 for n in ("tiny-chat", "org/tiny-embed", "tiny-rerank")}
    # the SBOM lists every weights file under its model
    sbom = json.loads((root / SBOM).read_text())
    groups = {c["group"] for c in sbom["components"] if c.get("group")}
    assert groups == {"tiny-chat", "org/tiny-embed", "tiny-rerank"}


def test_a_single_model_bundle_keeps_its_layout(site: Path) -> None:
    path = site / "single.yml"
    path.write_text("""deployment: single
hosts:
  - {name: h1, address: 10.0.0.1}
engine: {device: cpu}
model: {path: ./models/chat, served_name: tiny}
""")
    root, man, _ = build.build(load_inventory(path))
    assert (root / "model" / "config.json").is_file() and (root / "model.sha256").is_file()
    assert not (root / "models").exists() and "models" not in man.components
    assert man.components["model"]["name"] == "tiny"


def test_the_cache_key_follows_every_model_and_a_canary(site: Path) -> None:
    inv = load_inventory(_inventory(site, THREE))
    first = build.bundle_inputs(inv)
    (site / "models" / "rerank" / "config.json").write_text('{"changed": true}')  # the third model only
    assert build.bundle_inputs(inv) != first
    again = build.bundle_inputs(inv)
    stable = inv.served_models()[1]
    shutil.copytree(site / "models" / "embed", site / "embed-v2")
    canary = dataclasses.replace(stable, model=stable.model.model_copy(update={"path": site / "embed-v2"}))
    assert build.bundle_inputs(inv, {"emb": canary}) != again
    # a canary on stable's own weights (engine settings only) carries nothing more
    assert build.bundle_inputs(inv, {"emb": stable}) == again


def test_a_canary_with_its_own_weights_travels_beside_stable(site: Path) -> None:
    inv = load_inventory(_inventory(site, THREE))
    stable = inv.served_models()[0]
    make_tiny_model(site / "chat-v2", seed=7)
    canary = dataclasses.replace(stable, model=stable.model.model_copy(update={"path": site / "chat-v2"}))
    root, man, _ = build.build(inv, canaries={"chat": canary})
    listed = {f.path: f.sha256 for f in man.files}
    assert listed["model/model.safetensors"] != listed["models/tiny-chat.canary/model.safetensors"]
    assert _sums(root, "models/tiny-chat.canary.sha256")["model.safetensors"] == listed[
        "models/tiny-chat.canary/model.safetensors"]
    assert man.components["models"]["tiny-chat.canary"]["key"] == "chat"
    names = {g.component.name for g in contents.by_component(man) if g.component.kind == "model"}
    assert names == {"tiny-chat", "tiny-chat (canary)", "org/tiny-embed", "tiny-rerank"}


def test_a_weights_only_change_keeps_the_release(site: Path) -> None:
    inv = load_inventory(_inventory(site, THREE))
    _, before, _ = build.build(inv)
    make_tiny_model(site / "models" / "embed", seed=3)  # new weights for the second model
    _, after, built = build.build(inv)
    assert built and after.bundle_id != before.bundle_id
    assert after.release_id == before.release_id  # no new environments on the hosts
    d = contents.diff(before, after)
    assert d.same_release and [c.name for c in d.components if c.kind == "model"] == ["org/tiny-embed"]


def test_the_release_id_covers_no_weights_file(tmp_path: Path) -> None:
    """On the pre-#22 rule the primary's weights were part of the release id: new weights made
    the hosts install new environments."""
    files = {
        "wheels/demo-1.0-py3-none-any.whl": b"wheel",
        "model/config.json": b"{}",
        "model/model.safetensors": b"weights one",
        "models/emb/model.safetensors": b"embed one",
        "tools/uv": b"uv",
    }
    one = make_bundle(tmp_path / "one", None, files)
    (tmp_path / "one" / "model.sha256").write_text(one.checksums_text(prefix="model/"))
    changed = {**files, "model/model.safetensors": b"weights two", "models/emb/model.safetensors": b"two",
               "models/other/config.json": b"{}"}
    two = make_bundle(tmp_path / "two", None, changed)
    assert one.bundle_id != two.bundle_id and one.release_id == two.release_id
    # a listed sha256sum list changes with its weights and is no part of the release either
    extra = Manifest(two.target, two.components, two.packages,
                     [*two.files, manifest.FileEntry("model.sha256", 10, "0" * 64),
                      manifest.FileEntry("models/emb.sha256", 10, "1" * 64)])
    assert extra.release_id == two.release_id
    wheel_changed = make_bundle(tmp_path / "three", None, {**files, "wheels/demo-1.0-py3-none-any.whl": b"other"})
    assert wheel_changed.release_id != one.release_id



def test_preflight_counts_every_models_weights_on_the_disk(site: Path) -> None:
    inv = load_inventory(_inventory(site, THREE))
    _, man, _ = build.build(inv)
    weights_bytes = sum(f.size for f in man.files if f.path.startswith(("model/", "models/")))
    assert weights_bytes > 2 * man.components["model"]["size"]
    assert prepare.needs_for(inv, man).model_bytes == weights_bytes


def test_weights_by_reference_travel_as_a_signed_list_never_as_bytes(site: Path) -> None:
    from installer.bundle import sign, weights
    from installer.weights import verify as weights_verify

    listed = {"files": weights_verify.describe(str(site / "models" / "rerank"))}
    (site / "rerank.json").write_text(json.dumps(listed))
    by_reference = """  - {name: chat, served_name: tiny-chat, path: ./models/chat}
  - {name: emb, served_name: org/tiny-embed, path: ./models/embed, task: embed, hosts: [h1],
     source: {hosts: /data/models/embed}}
  - {name: rank, served_name: tiny-rerank, path: ./models/rerank, task: score, hosts: [h2],
     source: {mirror: 'https://minio.lab/models/rerank', manifest: ./rerank.json}}
"""
    inv = load_inventory(_inventory(site, by_reference))
    root, man, _ = build.build(inv)
    # no byte of either, and no sha256sum list beside them: the list is in the manifest itself
    assert not any(f.path.startswith(("models/org--tiny-embed", "models/tiny-rerank")) for f in man.files)
    refs = man.components[weights.BY_REFERENCE]
    assert refs["org--tiny-embed"]["source"] == {"hosts": "/data/models/embed"}
    assert refs["org--tiny-embed"]["files"] == weights_verify.describe(str(site / "models" / "embed"))
    assert refs["tiny-rerank"] == {
        "source": {"mirror": "https://minio.lab/models/rerank/"},
        "size": sum(e["size"] for e in listed["files"]),
        "files": sorted(listed["files"], key=lambda e: e["path"]),
    }
    verify(root)
    assert weights.mirror_size(man) == refs["tiny-rerank"]["size"]  # preflight's disk check counts it
    # inside manifest.json, so the signature covers it: one sha256 changed is a bad signature
    pair = sign.keygen(site / "keys")
    signed = (root / manifest.MANIFEST).read_bytes()
    signature = sign.signature_for(signed, sign.load_private_key(pair.private_key))
    trust = sign.Trust((pair.public_key,), False)
    sign.check_signature(signed, signature, trust, "bundle")
    first = refs["org--tiny-embed"]["files"][0]["sha256"]
    tampered = signed.replace(first.encode(), ("0" * 64).encode(), 1)
    with pytest.raises(BundleError, match="refusing bundle"):
        sign.check_signature(tampered, signature, trust, "bundle")
    # the hosts' verifier reads its folder's list from that manifest.json
    out = subprocess.run(
        ["python3", "-I", weights_verify.__file__, "verify", "--root", str(site / "models" / "embed"),
         "--manifest", str(root / manifest.MANIFEST), "--folder", "org--tiny-embed"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["ok"], out.stdout
    # the weights never change the release: the same as the bundle that carries all three
    assert man.release_id == build.build(load_inventory(_inventory(site, THREE)))[1].release_id
    # a new list for the mirror is a new bundle
    first_key = build.bundle_inputs(inv)
    listed["files"][0]["size"] += 1
    (site / "rerank.json").write_text(json.dumps(listed))
    assert build.bundle_inputs(inv) != first_key

"""model.source (docs/weights.md): bundle, hosts or mirror, each refusal at file:line at
validate, before any host is touched; and a model without it dumps as before (config digest)."""

import json
from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.inventory.weights_source import HostsSource, MirrorSource
from installer.weights import verify as weights_verify


def inventory(tmp_path: Path, source: str) -> Path:
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    (weights / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (weights / "model.safetensors").write_bytes(b"\0" * 64)
    path = tmp_path / "inv.yml"
    path.write_text(
        "deployment: w\n"
        "hosts:\n"
        "  - {name: h1, address: 10.0.0.1}\n"
        "model:\n"
        "  path: ./weights\n"
        "  served_name: tiny\n"
        f"{source}"
        "engine: {device: cpu}\n"
    )
    return path


def refused(path: Path) -> str:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return "\n".join([str(err.value), *err.value.details])


def test_without_source_the_bundle_carries_the_weights_and_the_dump_is_unchanged(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, ""))
    assert inv.model.source == "bundle"
    assert "source" not in inv.model_dump(mode="json")["model"]


def test_a_hosts_source_with_a_manifest_relative_to_the_inventory(tmp_path: Path) -> None:
    inventory(tmp_path, "")  # makes the folder
    listed = {"files": weights_verify.describe(str(tmp_path / "weights"))}
    (tmp_path / "list.json").write_text(json.dumps(listed))
    inv = load_inventory(inventory(tmp_path, "  source: {hosts: /data/models/tiny, manifest: ./list.json}\n"))
    assert inv.model.source == HostsSource(hosts="/data/models/tiny", manifest=tmp_path / "list.json")
    assert inv.model_dump(mode="json")["model"]["source"]["hosts"] == "/data/models/tiny"


def test_a_mirror_url_with_credentials_is_refused_at_its_line(tmp_path: Path) -> None:
    text = refused(inventory(tmp_path, "  source: {mirror: 'https://ops:s3cret@minio.lab:9000/models/tiny'}\n"))
    assert f"{tmp_path / 'inv.yml'}:7: model.source.mirror" in text, text
    assert "holds credentials" in text and "token_file" in text
    assert "s3cret" not in text  # the refusal does not echo the secret


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://minio.lab/models/tiny", "not an https:// URL"),
        ("https://minio.lab/models/tiny?X-Amz-Signature=abc", "query or fragment"),
        ("https://@minio.lab/models", "holds credentials"),
    ],
)
def test_other_mirror_urls_are_refused(tmp_path: Path, url: str, why: str) -> None:
    assert why in refused(inventory(tmp_path, f"  source: {{mirror: '{url}'}}\n"))


def test_a_mirror_url_is_kept_as_a_folder(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, "  source: {mirror: 'https://minio.lab:9000/models/tiny'}\n"))
    assert inv.model.source == MirrorSource(mirror="https://minio.lab:9000/models/tiny/")


def test_a_mirror_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    token.chmod(0o644)
    text = refused(inventory(tmp_path, f"  source: {{mirror: 'https://m.lab/x', token_file: {token}}}\n"))
    assert "readable by others" in text and "t0k3n" not in text
    token.chmod(0o600)
    assert load_inventory(inventory(tmp_path, f"  source: {{mirror: 'https://m.lab/x', token_file: {token}}}\n"))


@pytest.mark.parametrize("path", ["data/models", "/data/../etc", "/data/./x", "/data/models/a b", "/../home/x", "/./x"])
def test_a_host_path_not_absolute_and_plain_is_refused(tmp_path: Path, path: str) -> None:
    text = refused(inventory(tmp_path, f"  source: {{hosts: '{path}'}}\n"))
    assert f"{tmp_path / 'inv.yml'}:7: model.source.hosts" in text and "absolute path" in text


def test_a_manifest_path_escaping_the_folder_is_refused_at_its_line(tmp_path: Path) -> None:
    entry = {"path": "../../etc/shadow", "size": 1, "sha256": "0" * 64}
    (tmp_path / "list.json").write_text(json.dumps({"files": [entry]}))
    text = refused(inventory(tmp_path, "  source:\n    hosts: /data/models/tiny\n    manifest: list.json\n"))
    assert f"{tmp_path / 'inv.yml'}:9: model.source.manifest" in text, text
    assert "../../etc/shadow: escapes the model folder" in text


def test_an_unknown_source_key_is_refused(tmp_path: Path) -> None:
    text = refused(inventory(tmp_path, "  source: {hosts: /data/x, mirorr: y}\n"))
    assert "model.source.mirorr: unknown key" in text, text


@pytest.mark.parametrize("path", ["/home/ops/models/tiny", "/root/tiny", "/run/user/0/tiny", "/tmp/m", "/var/tmp/m"])
def test_a_host_path_the_engines_cannot_see_is_refused(tmp_path: Path, path: str) -> None:
    text = refused(inventory(tmp_path, f"  source: {{hosts: '{path}'}}\n"))
    assert f"{tmp_path / 'inv.yml'}:7: model.source.hosts" in text and "ProtectHome" in text, text

"""`bundle inspect` and `bundle diff`: components, versions and sizes read from manifests, and the
bytes an upgrade sends; plus the CLI commands over real small bundles."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.bundle import build, contents, sign
from installer.bundle.manifest import FileEntry, Manifest
from installer.cli import _register, app
from tests.support.bundles import make_bundle


def manifest(files: dict[str, tuple[int, str]], components: dict | None = None) -> Manifest:
    return Manifest(
        {"os": "debian-12"},
        components or {"uv": "0.13.9", "model": {"name": "tiny", "size": 0}, "playbooks": "abc"},
        [],
        [FileEntry(p, size, sha) for p, (size, sha) in sorted(files.items())],
    )


OLD = {
    "wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": (190, "t1"),
    "wheels/numpy-2.3.5-cp311-cp311-manylinux_2_28_x86_64.whl": (17, "n1"),
    "debs/libnuma1_2.0.16-1_amd64.deb": (2, "d1"),
    "debs/Packages": (1, "p1"),
    "model/model.safetensors": (50, "m1"),
    "model.sha256": (1, "ms1"),
    "tools/uv": (40, "u1"),
    "playbooks/site.yml": (1, "s1"),
    "engine-wheels.txt": (1, "e1"),
}


@pytest.mark.parametrize(
    ("path", "kind", "name", "version"),
    [
        (
            "wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
            "wheel",
            "torch",
            "2.13.0+cpu",
        ),
        ("wheels/Foo_Bar-1.0-py3-none-any.whl", "wheel", "foo-bar", "1.0"),
        ("debs/libnuma1_2.0.16-1_amd64.deb", "deb", "libnuma1", "2.0.16-1"),
        ("debs/libfoo_1%3a2.3-1_amd64.deb", "deb", "libfoo", "1:2.3-1"),
        ("debs/Packages", "index", "apt repository index", ""),
        ("model/model.safetensors", "model", "tiny", ""),
        ("model.sha256", "model", "tiny", ""),
        ("tools/uv", "tool", "uv", "0.13.9"),
        ("playbooks/roles/common/tasks/main.yml", "playbooks", "playbooks", "abc"),
        ("engine-wheels.txt", "index", "engine-wheels.txt", ""),
    ],
)
def test_component_of(path: str, kind: str, name: str, version: str) -> None:
    assert contents.component_of(path, manifest(OLD)) == contents.Component(kind, name, version)


def test_components_are_grouped_by_kind_then_largest_first() -> None:
    groups = contents.by_component(manifest(OLD))
    assert [(g.component.kind, g.component.name) for g in groups][:4] == [
        ("model", "tiny"),
        ("wheel", "torch"),
        ("wheel", "numpy"),
        ("tool", "uv"),
    ]
    model = groups[0]
    assert (len(model.files), model.size) == (2, 51)
    assert contents.size_by_kind(manifest(OLD))["wheel"] == 207


def test_diff_of_a_wheel_upgrade_and_a_new_package() -> None:
    new_files = dict(OLD)
    del new_files["wheels/numpy-2.3.5-cp311-cp311-manylinux_2_28_x86_64.whl"]
    new_files["wheels/numpy-2.4.0-cp311-cp311-manylinux_2_28_x86_64.whl"] = (18, "n2")
    new_files["debs/libfoo_1.0_amd64.deb"] = (3, "f1")
    new_files["debs/Packages"] = (2, "p2")
    # a file that moved keeps its content: a host links it instead of receiving it
    new_files["model/renamed.safetensors"] = new_files.pop("model/model.safetensors")
    d = contents.diff(manifest(OLD), manifest(new_files))
    changes = {(c.change, c.name): c for c in d.components}
    assert changes[("changed", "numpy")].old_version == "2.3.5"
    assert changes[("changed", "numpy")].new_version == "2.4.0"
    assert ("added", "libfoo") in changes
    assert ("changed", "tiny") in changes  # a path changed, the bytes did not
    assert ("changed", "torch") not in changes
    assert d.transfer_bytes == 18 + 3 + 2
    assert len(d.added_files) == 3 and len(d.removed_files) == 2 and len(d.changed_files) == 1
    assert not d.same_release


def test_diff_of_a_playbooks_only_change_keeps_the_release() -> None:
    new_files = dict(OLD, **{"playbooks/site.yml": (2, "s2")})
    d = contents.diff(manifest(OLD), manifest(new_files))
    assert [(c.change, c.kind) for c in d.components] == [("changed", "playbooks")]
    assert d.same_release and d.transfer_bytes == 2


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    _register()
    return CliRunner()


def test_cli_keygen_inspect_diff_and_verify(cli: CliRunner, tmp_path: Path) -> None:
    out = cli.invoke(app, ["bundle", "keygen"])
    assert out.exit_code == 0, out.output
    key = tmp_path / "state" / "keys" / "bundle-signing.key"
    make_bundle(tmp_path / "old", key)
    build.write_tar(tmp_path / "old", tmp_path / "old.tar")
    make_bundle(
        tmp_path / "new",
        key,
        {
            "wheels/demo-1.1-py3-none-any.whl": os.urandom(1000),
            "model/config.json": b'{"hidden_size": 64}',
        },
    )

    out = cli.invoke(app, ["bundle", "inspect", str(tmp_path / "old.tar")])
    assert out.exit_code == 0, out.output
    assert "signed by trusted key" in out.output and "demo" in out.output

    out = cli.invoke(app, ["bundle", "inspect", "--json", str(tmp_path / "old.tar")])
    data = json.loads(out.output)
    assert data["signed"] is True and data["files"] == 5
    assert {c["name"] for c in data["components"]} >= {"demo", "uv", "playbooks"}

    out = cli.invoke(
        app, ["bundle", "diff", "--json", str(tmp_path / "old.tar"), str(tmp_path / "new")]
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["transfer_bytes"] == 1000  # only the new wheel's bytes are not on the hosts yet
    assert {(c["change"], c["name"]) for c in d["components"]} >= {("changed", "demo")}

    out = cli.invoke(app, ["bundle", "verify", str(tmp_path / "old.tar")])
    assert out.exit_code == 0, out.output
    assert "OK bundle" in out.output and "verified in" in out.output


def test_cli_verify_refuses_an_unsigned_bundle_unless_insecure(
    cli: CliRunner, tmp_path: Path
) -> None:
    make_bundle(tmp_path / "b", None)
    out = cli.invoke(app, ["bundle", "verify", str(tmp_path / "b")])
    assert out.exit_code != 0
    out = cli.invoke(app, ["bundle", "verify", "--insecure", str(tmp_path / "b")])
    assert out.exit_code == 0, out.output
    assert "INSECURE" in out.output
    sign.keygen()  # now a trusted key exists, but the bundle is still unsigned
    assert cli.invoke(app, ["bundle", "verify", str(tmp_path / "b")]).exit_code != 0

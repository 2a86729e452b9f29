"""The bundle's SBOM (sbom.cdx.json): valid CycloneDX, every carried file with its sha256, signed
with the manifest, printed by `installer bundle sbom` and compared by `installer bundle diff`.

Small real bundles (real wheels, real keys, real tars) stand in for a built one.
"""

import json
import os
import tarfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from typer.testing import CliRunner

from installer.base.errors import BundleError
from installer.bundle import build, sbom, sbom_read, sign
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SBOM, SIGNATURE, Manifest, scan
from installer.cli import _register, app
from tests.support.bundles import make_bundle, wheel
from tests.support.gpu_debs import fake_deb

CURL = "targets/debian-12/debs/curl_7.88.1-10+deb12u8_amd64.deb"
JQ = "targets/ubuntu-24.04/debs/jq_1.7.1-3build1_amd64.deb"
PROVIDER = "terraform/plugins/registry.terraform.io/hashicorp/aws/5.80.0/linux_amd64/terraform-provider-aws"
# Every kind of file the SBOM lists, and some it does not (playbooks, the apt index).
FILES = {
    "wheels/demo-1.0-py3-none-any.whl": wheel("demo", "1.0", ["License-Expression: MIT"]),
    "wheels/olde-2.3-py3-none-any.whl": wheel(
        "olde", "2.3", ["License: UNKNOWN", "Classifier: License :: OSI Approved :: Apache Software License"]
    ),
    CURL: b"curl deb bytes",
    JQ: b"jq deb bytes",
    "targets/debian-12/debs/Packages": b"Package: curl\n",
    "targets/debian-12/engine-wheels.txt": b"wheels/demo-1.0-py3-none-any.whl\n",
    "tools/uv": b"#!/bin/sh\necho uv\n",
    "terraform/bin/terraform": b"terraform binary",
    PROVIDER: b"provider binary",
    "monitoring/node_exporter-1.8.2.linux-amd64.tar.gz": b"tarball bytes",
    "model/config.json": b'{"hidden_size": 64}',
    "model/model.safetensors": os.urandom(3000),
    "playbooks/site.yml": b"---\n- hosts: all\n",
}
PACKAGES = [{"name": "curl", "version": "7.88.1-10+deb12u8", "groups": "", "file": CURL, "target": "debian-12"}]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    return tmp_path


@pytest.fixture
def key(env: Path) -> Path:
    return sign.keygen().private_key


def _bundle(root: Path, key: Path | None, files: dict[str, bytes] = FILES) -> Manifest:
    return make_bundle(root, key, dict(files), PACKAGES, with_sbom=True)


def _doc(root: Path) -> dict:
    return json.loads((root / SBOM).read_text())


def test_the_sbom_validates_against_the_cyclonedx_schema(env: Path) -> None:
    _bundle(env / "b", None)
    text = (env / "b" / SBOM).read_text()
    assert json.loads(text)["specVersion"] == "1.6"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None


def test_every_wheel_deb_tool_and_model_file_is_listed_with_its_sha256(env: Path) -> None:
    man = _bundle(env / "b", None)
    listed = {e.path: e for e in sbom.entries(_doc(env / "b"))}
    carried = {
        f.path: f.sha256 for f in man.files
        if f.path.startswith(("wheels/", "tools/", "model/", "terraform/", "monitoring/")) or f.path.endswith(".deb")
    }
    assert len(carried) == 10
    assert {p: e.sha256 for p, e in listed.items()} == carried
    assert (listed["wheels/demo-1.0-py3-none-any.whl"].name, listed["wheels/demo-1.0-py3-none-any.whl"].licence) == (
        "demo", "MIT")
    assert listed["wheels/olde-2.3-py3-none-any.whl"].licence == "Apache Software License"
    assert (listed[CURL].name, listed[CURL].version, listed[JQ].name) == ("curl", "7.88.1-10+deb12u8", "jq")
    assert (listed[PROVIDER].name, listed[PROVIDER].version) == ("hashicorp/aws", "5.80.0")
    assert (listed["tools/uv"].version, listed["model/model.safetensors"].kind) == ("0.13.9", "model")
    purls = {c["bom-ref"]: c.get("purl") for c in _doc(env / "b")["components"]}
    assert purls["wheels/demo-1.0-py3-none-any.whl"] == "pkg:pypi/demo@1.0"
    assert purls[CURL] == "pkg:deb/debian/curl@7.88.1-10%2Bdeb12u8?arch=amd64&distro=bookworm"
    assert purls[JQ] == "pkg:deb/ubuntu/jq@1.7.1-3build1?arch=amd64&distro=noble"


def test_a_broken_wheel_is_refused_by_name(env: Path) -> None:
    with pytest.raises(BundleError, match=r"bad-1\.0-py3-none-any\.whl is not a readable wheel"):
        _bundle(env / "b", None, {**FILES, "wheels/bad-1.0-py3-none-any.whl": b"not a zip"})


def test_the_sbom_is_in_the_signed_manifest_and_an_edit_fails_verification(env: Path, key: Path) -> None:
    man = _bundle(env / "b", key)
    assert SBOM in {f.path for f in man.files}
    trust = sign.Trust((), insecure=False)
    build.write_tar(env / "b", env / "b.tar")
    assert sbom_read.read(env / "b.tar", trust).entries == sbom.entries(_doc(env / "b"))

    doc = _doc(env / "b")
    doc["components"][0]["version"] = "9.9"
    (env / "b" / SBOM).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="failed verification") as refused:
        build.check_bundle(env / "b", trust)
    assert [p.split(":")[0] for p in refused.value.details] == [SBOM]
    with pytest.raises(BundleError, match="does not match the manifest's sha256"):
        sbom_read.read(env / "b", trust)
    build.write_tar(env / "b", env / "edited.tar")
    with pytest.raises(BundleError, match="failed verification"):
        build.check_bundle(env / "edited.tar", trust)


def test_the_sbom_does_not_change_the_release(env: Path) -> None:
    with_sbom = _bundle(env / "a", None)
    without = make_bundle(env / "b", None, dict(FILES), PACKAGES)
    assert with_sbom.bundle_id != without.bundle_id
    assert with_sbom.release_id == without.release_id


@pytest.fixture
def cli(env: Path) -> CliRunner:
    _register()
    return CliRunner()


def test_cli_sbom_prints_the_signed_file_or_a_table(cli: CliRunner, env: Path, key: Path) -> None:
    _bundle(env / "b", key)
    build.write_tar(env / "b", env / "b.tar")
    out = cli.invoke(app, ["bundle", "sbom", str(env / "b.tar")])
    assert out.exit_code == 0, out.output
    assert out.stdout == (env / "b" / SBOM).read_text()

    out = cli.invoke(app, ["bundle", "sbom", "--format", "table", str(env / "b.tar")])
    assert out.exit_code == 0, out.output
    for words in ("demo", "1.0", "MIT", "curl", "7.88.1-10+deb12u8", "jq", "hashicorp/aws", "node_exporter",
                  "demo-model/model.safetensors", "10 components"):
        assert words in out.output, words

    assert cli.invoke(app, ["bundle", "sbom", "--format", "spdx", str(env / "b.tar")]).exit_code != 0


def test_cli_sbom_refuses_an_unsigned_bundle_and_one_built_before_sboms(cli: CliRunner, env: Path) -> None:
    _bundle(env / "b", None)
    sign.keygen()
    out = cli.invoke(app, ["bundle", "sbom", str(env / "b")])
    assert out.exit_code != 0
    out = cli.invoke(app, ["bundle", "sbom", "--insecure", str(env / "b")])
    assert out.exit_code == 0 and "INSECURE" in out.stderr and json.loads(out.stdout)["bomFormat"] == "CycloneDX"

    make_bundle(env / "old", None)
    out = cli.invoke(app, ["bundle", "sbom", "--insecure", str(env / "old")])
    assert out.exit_code != 0
    assert f"has no {SBOM}" in str(out.exception)


def test_cli_diff_shows_sbom_component_changes(cli: CliRunner, env: Path, key: Path) -> None:
    _bundle(env / "old", key)
    build.write_tar(env / "old", env / "old.tar")
    newer = {k: v for k, v in FILES.items() if k not in ("wheels/demo-1.0-py3-none-any.whl", JQ)}
    newer["wheels/demo-1.1-py3-none-any.whl"] = wheel("demo", "1.1", ["License-Expression: MIT"])
    newer["wheels/fresh-0.1-py3-none-any.whl"] = wheel("fresh", "0.1", [])
    _bundle(env / "new", key, newer)

    out = cli.invoke(app, ["bundle", "diff", "--json", str(env / "old.tar"), str(env / "new")])
    assert out.exit_code == 0, out.output
    changes = {
        (c["change"], c["name"], c["old_version"], c["new_version"]) for c in json.loads(out.stdout)["sbom_changes"]
    }
    assert changes == {
        ("version", "demo", "1.0", "1.1"), ("added", "fresh", "", "0.1"), ("removed", "jq", "1.7.1-3build1", "")
    }

    out = cli.invoke(app, ["bundle", "diff", str(env / "old.tar"), str(env / "new")])
    assert out.exit_code == 0, out.output
    assert "SBOM component changes" in out.output
    assert any("demo" in line and "1.0" in line and "1.1" in line for line in out.output.splitlines())

    make_bundle(env / "presbom", key)
    out = cli.invoke(app, ["bundle", "diff", str(env / "presbom"), str(env / "new")])
    assert out.exit_code == 0 and "SBOM: not compared" in out.output


def test_the_tar_carries_the_sbom_as_a_listed_member(env: Path) -> None:
    _bundle(env / "b", None)
    build.write_tar(env / "b", env / "b.tar")
    with tarfile.open(env / "b.tar") as tar:
        assert SBOM in tar.getnames()
    man = Manifest.from_json((env / "b" / MANIFEST).read_text())
    assert sbom_read.of_bundle(env / "b.tar", man) == _doc(env / "b")


DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: curl

Files: *
Copyright: 1996-2023, Daniel Stenberg
License: curl

Files: lib/md4.c
Copyright: 2001, Alexander Peslyak
License: public-domain

License: curl
 COPYRIGHT AND PERMISSION NOTICE
"""


def test_a_deb_licence_comes_from_its_machine_readable_copyright_file(env: Path) -> None:
    debs = env / "debs"
    debs.mkdir()
    fake_deb(debs, "curl", "7.88.1-10", files={"/usr/share/doc/curl/copyright": DEP5})
    fake_deb(debs, "jq", "1.7.1-3", files={"/usr/share/doc/jq/copyright": "jq is MIT licensed, see COPYING\n"})
    files = {
        "targets/debian-12/debs/curl_7.88.1-10_all.deb": (debs / "curl_7.88.1-10_all.deb").read_bytes(),
        "targets/debian-12/debs/jq_1.7.1-3_all.deb": (debs / "jq_1.7.1-3_all.deb").read_bytes(),
        "tools/uv": b"uv",
    }
    _bundle(env / "b", None, files)
    listed = {e.name: e.licence for e in sbom.entries(_doc(env / "b"))}
    assert listed == {"curl": "curl", "jq": "", "uv": ""}  # free-text copyright: no licence claimed
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str((env / "b" / SBOM).read_text()) is None


def _resign(root: Path, key: Path | None) -> None:
    """The manifest, checksum list and signature made again over the directory as it is now, the
    SBOM left as it was: a bundle whose every byte verifies, signed, with that SBOM in it."""
    man = Manifest({"os": "debian-12"}, {"demo": "1.0", "uv": "0.13.9"}, PACKAGES, scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    if key is not None:
        (root / SIGNATURE).write_bytes(sign.signature_for((root / MANIFEST).read_bytes(), sign.load_private_key(key)))


def test_verify_passes_a_bundle_whose_sbom_names_every_carried_file(env: Path, key: Path) -> None:
    # every kind of file the SBOM lists, and some it does not: sbom.must_list agrees with the writer
    trust = sign.Trust((), insecure=False)
    _bundle(env / "b", key)
    build.write_tar(env / "b", env / "b.tar")
    for bundle in (env / "b", env / "b.tar"):
        build.check_bundle(bundle, trust)
    make_bundle(env / "presbom", key)  # built before bundles carried an SBOM: nothing to cover
    build.check_bundle(env / "presbom", trust)


def test_verify_refuses_a_signed_sbom_that_leaves_out_a_carried_wheel(env: Path, key: Path) -> None:
    _bundle(env / "b", key)
    (env / "b" / "wheels/extra-2.0-py3-none-any.whl").write_bytes(wheel("extra", "2.0", []))
    _resign(env / "b", key)  # the wheel is carried, listed in the signed manifest, not in the SBOM
    build.write_tar(env / "b", env / "b.tar")
    trust = sign.Trust((), insecure=False)
    for bundle in (env / "b", env / "b.tar"):
        with pytest.raises(BundleError, match=r"its SBOM \(sbom\.cdx\.json\) does not describe") as refused:
            build.check_bundle(bundle, trust)
        assert refused.value.details[0] == "wheels/extra-2.0-py3-none-any.whl: carried, but not in the SBOM"


def test_verify_refuses_an_sbom_that_misnames_a_wheel_or_lists_what_is_not_carried(env: Path, key: Path) -> None:
    _bundle(env / "b", key)
    doc = _doc(env / "b")
    wheel_of = next(c for c in doc["components"] if c["bom-ref"] == "wheels/demo-1.0-py3-none-any.whl")
    wheel_of["version"] = "9.9"  # a scanner would look up demo 9.9's advisories, not 1.0's
    gone = next(c for c in doc["components"] if c["bom-ref"] == CURL)
    gone["bom-ref"] = "targets/debian-12/debs/curl_7.0_amd64.deb"
    gone["properties"] = [{"name": sbom.PATH_PROPERTY, "value": gone["bom-ref"]}]
    (env / "b" / SBOM).write_text(json.dumps(doc))
    _resign(env / "b", key)
    with pytest.raises(BundleError) as refused:
        build.check_bundle(env / "b", sign.Trust((), insecure=False))
    assert refused.value.details[:3] == [
        f"{CURL}: carried, but not in the SBOM",
        "wheels/demo-1.0-py3-none-any.whl: the SBOM names demo 9.9, the file is demo 1.0",
        "targets/debian-12/debs/curl_7.0_amd64.deb: in the SBOM, but not carried",
    ]


def test_cli_diff_refuses_unsigned_and_untrusted_bundles_unless_insecure(cli: CliRunner, env: Path) -> None:
    sign.keygen()
    other = sign.keygen(env / "elsewhere", "other").private_key  # a key nobody here trusts
    _bundle(env / "old", other)
    _bundle(env / "new", None)

    out = cli.invoke(app, ["bundle", "diff", str(env / "old"), str(env / "new")])
    assert out.exit_code != 0
    assert f"refusing bundle {env / 'old'}: the bundle is signed by key" in str(out.exception)
    out = cli.invoke(app, ["bundle", "diff", "--trusted-key", str(env / "elsewhere" / "other.pub"),
                           str(env / "old"), str(env / "new")])
    assert out.exit_code != 0
    assert f"refusing bundle {env / 'new'}: the bundle is not signed" in str(out.exception)

    out = cli.invoke(app, ["bundle", "diff", "--insecure", str(env / "old"), str(env / "new")])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # as read, whatever the terminal's width wrapped
    signer = sign.key_id(sign.load_private_key(other).public_key())
    assert text.startswith(
        f"INSECURE old bundle {env / 'old'}: the bundle is signed by key {signer}, "
        f"which is not one of the trusted keys INSECURE new bundle {env / 'new'}: the bundle is not signed"
    )
    assert "--insecure: this comparison is of bundles whose origin is NOT verified" in text
    assert text.endswith(f"INSECURE not verified: old ({env / 'old'}) and new ({env / 'new'})")

    out = cli.invoke(app, ["bundle", "diff", "--json", "--insecure", str(env / "old"), str(env / "new")])
    assert out.exit_code == 0, out.output
    signatures = json.loads(out.stdout)["signatures"]
    assert (signatures["old"]["verified"], signatures["new"]["verified"]) == (False, False)
    assert "the bundle is not signed" in signatures["new"]["problem"]
    assert f"INSECURE: new bundle {env / 'new'}: the bundle is not signed" in out.stderr


def test_cli_diff_of_trusted_bundles_says_who_signed_each(cli: CliRunner, env: Path, key: Path) -> None:
    _bundle(env / "old", key)
    _bundle(env / "new", key, {**FILES, "tools/uv": b"a newer uv"})
    out = cli.invoke(app, ["bundle", "diff", str(env / "old"), str(env / "new")])
    assert out.exit_code == 0, out.output
    assert "INSECURE" not in out.output
    assert f"old: signed by trusted key {sign.key_id(sign.load_private_key(key).public_key())}" in out.output
    out = cli.invoke(app, ["bundle", "diff", "--json", str(env / "old"), str(env / "new")])
    assert json.loads(out.stdout)["signatures"]["new"]["verified"] is True and out.stderr == ""

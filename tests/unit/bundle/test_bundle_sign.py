"""Signed bundles: keygen, signing at build, and refusal of unsigned, tampered or untrusted ones.

Small real bundles (a few files, real ed25519 keys, real tars) stand in for the 1 GB one.
"""

import stat
import tarfile
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import build, sign
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE
from tests.support.bundles import make_bundle


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def keys(env: Path) -> sign.KeyPair:
    return sign.keygen()


@pytest.fixture
def signed_tar(env: Path, keys: sign.KeyPair) -> Path:
    """As `bundle build` makes it: an unsigned (cached) directory, the signature in the tar."""
    root = env / "bundle"
    make_bundle(root, None)
    private = sign.load_private_key(keys.private_key)
    build.write_tar(
        root, env / "b.tar", sign.signature_for((root / MANIFEST).read_bytes(), private)
    )
    assert not (root / SIGNATURE).exists()
    return env / "b.tar"


def flip_byte(tar_path: Path, member: str, where: float = 0.5) -> None:
    with tarfile.open(tar_path) as tar:
        info = tar.getmember(member)
    offset = info.offset_data + int(info.size * where)
    with tar_path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_keygen_writes_a_private_key_only_root_can_read(keys: sign.KeyPair, env: Path) -> None:
    assert keys.private_key == env / "state" / "keys" / "bundle-signing.key"
    assert stat.S_IMODE(keys.private_key.stat().st_mode) == 0o600
    assert keys.public_key.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert len(keys.key_id) == 16
    assert sign.default_trusted_keys() == [keys.public_key]


def test_keygen_never_replaces_a_key_silently(keys: sign.KeyPair) -> None:
    with pytest.raises(BundleError, match="already exists"):
        sign.keygen()
    assert sign.keygen(force=True).key_id != keys.key_id


def test_a_group_readable_signing_key_is_refused(keys: sign.KeyPair, env: Path) -> None:
    keys.private_key.chmod(0o640)
    with pytest.raises(BundleError, match="readable by other users") as err:
        sign.load_private_key(keys.private_key)
    assert err.value.details == [f"fix: chmod 600 {keys.private_key}"]


def test_signed_tar_puts_manifest_and_signature_first(signed_tar: Path) -> None:
    with tarfile.open(signed_tar) as tar:
        assert tar.getnames()[:3] == [MANIFEST, SIGNATURE, CHECKSUMS]


def test_signed_bundle_opens_and_names_its_key(signed_tar: Path, keys: sign.KeyPair) -> None:
    opened = build.open_bundle(signed_tar, sign.Trust())
    assert opened.signature.key_id == keys.key_id
    assert opened.signature.trusted_key == keys.public_key
    assert (opened.root / "tools/uv").stat().st_mode & 0o111  # modes survive the unpack
    assert (opened.root / SIGNATURE).is_file()
    # A second open reuses the unpacked copy once both it and the tar verify.
    again = build.open_bundle(signed_tar, sign.Trust())
    assert again.root == opened.root


@pytest.mark.parametrize("member", ["model/model.safetensors", "tools/uv", CHECKSUMS])
def test_one_flipped_payload_byte_is_refused(signed_tar: Path, member: str, env: Path) -> None:
    flip_byte(signed_tar, member)
    with pytest.raises(BundleError, match="failed verification") as err:
        build.open_bundle(signed_tar, sign.Trust())
    assert any(member in line for line in err.value.details)
    # Nothing half-checked is left for a later run to pick up.
    assert list((env / "cache" / "unpacked").iterdir()) == []


def test_one_flipped_manifest_byte_fails_the_signature(signed_tar: Path) -> None:
    flip_byte(signed_tar, MANIFEST, where=0.3)
    with pytest.raises(BundleError, match="changed after it was signed"):
        build.open_bundle(signed_tar, sign.Trust())


def test_a_flipped_byte_is_refused_even_after_a_good_copy_was_unpacked(
    signed_tar: Path, env: Path
) -> None:
    build.open_bundle(signed_tar, sign.Trust())
    bad = env / "bad.tar"
    bad.write_bytes(signed_tar.read_bytes())
    flip_byte(bad, "model/model.safetensors")
    with pytest.raises(BundleError, match="failed verification"):
        build.open_bundle(bad, sign.Trust())


def test_unsigned_bundle_is_refused_unless_insecure(env: Path, keys: sign.KeyPair) -> None:
    make_bundle(env / "unsigned", None)
    with pytest.raises(BundleError, match="not signed") as err:
        build.open_bundle(env / "unsigned", sign.Trust())
    assert any("--insecure" in line for line in err.value.details)
    opened = build.open_bundle(env / "unsigned", sign.Trust(insecure=True))
    assert opened.signature.trusted_key is None
    assert "INSECURE" in opened.signature.describe


def test_insecure_still_checks_every_byte(env: Path) -> None:
    make_bundle(env / "unsigned", None)
    build.write_tar(env / "unsigned", env / "u.tar")
    flip_byte(env / "u.tar", "model/model.safetensors")
    with pytest.raises(BundleError, match="failed verification"):
        build.open_bundle(env / "u.tar", sign.Trust(insecure=True))


def test_bundle_signed_by_another_key_is_refused(env: Path, keys: sign.KeyPair) -> None:
    stranger = sign.keygen(env / "elsewhere")
    make_bundle(env / "b", stranger.private_key)
    with pytest.raises(BundleError, match=f"signed by key {stranger.key_id}, which is not"):
        build.open_bundle(env / "b", sign.Trust())
    # Trusting it explicitly (--trusted-key) accepts it; the default keys are then not used.
    opened = build.open_bundle(env / "b", sign.Trust(keys=(stranger.public_key,)))
    assert opened.signature.key_id == stranger.key_id


def test_no_trusted_key_at_all_says_where_to_put_one(env: Path) -> None:
    pair = sign.keygen(env / "builder")
    make_bundle(env / "b", pair.private_key)
    with pytest.raises(BundleError, match="no trusted public key") as err:
        build.open_bundle(env / "b", sign.Trust())
    assert any(str(env / "state" / "keys") in line for line in err.value.details)


def test_a_file_added_to_a_signed_directory_is_refused(env: Path, keys: sign.KeyPair) -> None:
    make_bundle(env / "b", keys.private_key)
    (env / "b" / "wheels" / "extra-1.0-py3-none-any.whl").write_bytes(b"not signed")
    with pytest.raises(BundleError, match="failed verification") as err:
        build.open_bundle(env / "b", sign.Trust())
    assert "wheels/extra-1.0-py3-none-any.whl: not listed in the manifest" in err.value.details


def test_a_checksum_list_that_disagrees_with_the_manifest_is_refused(
    env: Path, keys: sign.KeyPair
) -> None:
    # Hosts check files against bundle.sha256: it must be the signed list, not a look-alike.
    man = make_bundle(env / "b", keys.private_key)
    (env / "b" / CHECKSUMS).write_text(man.checksums_text().replace("model/", "modeX/", 1))
    with pytest.raises(BundleError, match="failed verification"):
        build.open_bundle(env / "b", sign.Trust())


def test_a_symlink_in_the_tar_is_refused(env: Path, keys: sign.KeyPair) -> None:
    make_bundle(env / "b", keys.private_key)
    build.write_tar(env / "b", env / "b.tar")
    with tarfile.open(env / "b.tar", "a") as tar:
        info = tarfile.TarInfo("model/escape")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    with pytest.raises(BundleError, match="failed verification") as err:
        build.open_bundle(env / "b.tar", sign.Trust())
    assert "model/escape: not a plain file inside the bundle" in err.value.details


def test_signature_is_deterministic_and_covers_the_exact_bytes(keys: sign.KeyPair) -> None:
    private = sign.load_private_key(keys.private_key)
    assert sign.signature_for(b"abc", private) == sign.signature_for(b"abc", private)
    sig = sign.signature_for(b"abc", private)
    trust = sign.Trust()
    assert sign.check_signature(b"abc", sig, trust, "x").key_id == keys.key_id
    with pytest.raises(BundleError, match="changed after it was signed"):
        sign.check_signature(b"abd", sig, trust, "x")
    with pytest.raises(BundleError, match="unreadable"):
        sign.check_signature(b"abc", b"{not json", trust, "x")


def test_a_damaged_tar_header_or_a_truncated_tar_is_refused(signed_tar: Path, env: Path) -> None:
    # Tar framing carries no content, but damage to it must not let missing files pass.
    with tarfile.open(signed_tar) as tar:
        header = tar.getmember("model/config.json").offset
    data = bytearray(signed_tar.read_bytes())
    data[header + 3] ^= 0x01  # inside the member's name: the header checksum no longer matches
    broken = env / "broken.tar"
    broken.write_bytes(bytes(data))
    with pytest.raises(BundleError):
        build.open_bundle(broken, sign.Trust())
    truncated = env / "truncated.tar"
    truncated.write_bytes(signed_tar.read_bytes()[: len(data) // 2])
    with pytest.raises(BundleError):
        build.open_bundle(truncated, sign.Trust())
    assert list((env / "cache" / "unpacked").iterdir()) == []

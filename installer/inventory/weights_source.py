"""Where the hosts get a model's weights (`model.source`, docs/weights.md): `bundle` (the bundle
carries them, as before), `{hosts: /path}` (already on every host that serves it, or on a
shared mount) or `{mirror: https://...}` (an internal HTTPS or S3-compatible store). With the
last two the bundle carries the signed list of the files (path, size, sha256), never their
bytes: from `manifest:` (the output of `installer/weights/verify.py describe` run where the
weights are) or, without it, hashed from `model.path` on this machine when the bundle is built.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag

from installer.weights import verify as weights_verify

# An absolute path on the hosts, without '.' or '..' parts (as engine.host_torch).
_HOST_PATH = re.compile(r"(?!.*/\.\.?(?:/|$))/[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")


# The engines' units have ProtectHome=true (playbooks/roles/engine/templates/engine.service.j2):
# weights under these would pass the verifier (root) and then be invisible to the engine.
# PrivateTmp=true likewise gives them an empty /tmp and /var/tmp of their own.
_HIDDEN_FROM_ENGINES = ("/home", "/root", "/run/user", "/proc", "/sys", "/dev", "/tmp", "/var/tmp")


def _host_path(value: str) -> str:
    if not _HOST_PATH.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an absolute path on the hosts of letters, digits, '.', '_', '+', '-' and '/', "
            "without '.' or '..' parts (e.g. /data/models/DeepSeek-R1)"
        )
    hidden = next((p for p in _HIDDEN_FROM_ENGINES if value == p or value.startswith(p + "/")), None)
    if hidden is not None:
        raise ValueError(
            f"{value} is under {hidden}, which the engines' hardened units cannot see (ProtectHome, PrivateTmp); "
            "move the weights elsewhere (e.g. /data/models/...)"
        )
    return value


def _mirror_url(value: str) -> str:
    """https only, and no credentials in it: a URL is logged, shown and recorded in revisions."""
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(
            "the mirror URL holds credentials (user:password@); remove them and put a token in the "
            "file token_file names (0600), which travels to the hosts as a secret"
        )
    if parts.query or parts.fragment:
        raise ValueError(
            "the mirror URL has a query or fragment (a presigned URL's signature is a credential); "
            "give the folder's URL, and a token in the file token_file names"
        )
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"{value!r} is not an https:// URL (the hosts reach the mirror over TLS only)")
    return value.rstrip("/") + "/"


def read_manifest(path: Path) -> list[dict[str, Any]]:
    """The list of files a `manifest:` file gives, checked (paths inside the folder, sizes,
    sha256): ValueError names the entry, so validate reports it at the manifest's line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path} ({exc.__class__.__name__})") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    files = data.get("files") if isinstance(data, dict) else None
    try:
        entries = weights_verify.check_entries(files)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not entries:
        raise ValueError(f"{path} lists no files")
    return entries


def _manifest_file(value: Path) -> Path:
    read_manifest(value)
    return value


ManifestFile = Annotated[Path, Field(strict=False), AfterValidator(_manifest_file)]


def _token_file(value: Path) -> Path:
    try:
        mode = value.stat().st_mode
    except OSError as exc:
        raise ValueError(f"cannot read {value} ({exc.strerror})") from None
    if mode & 0o077:
        raise ValueError(f"{value} is readable by others (mode {mode & 0o777:o}); chmod 600 it")
    return value


class _Reference(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the signed list of files; None: model.path is hashed when the bundle is built
    manifest: ManifestFile | None = None


class HostsSource(_Reference):
    hosts: Annotated[str, AfterValidator(_host_path)]


class MirrorSource(_Reference):
    mirror: Annotated[str, AfterValidator(_mirror_url)]
    # a file on this machine (0600) whose one line is the bearer token the hosts send; it travels
    # to the hosts as a 0600 secret, never in the URL, a log line or the bundle
    token_file: Annotated[Path, Field(strict=False), AfterValidator(_token_file)] | None = None


# The tags have '[': the loader leaves such parts out of an error's key path (loader._clean_loc),
# so a refusal names model.source.mirror, not model.source.<tag>.mirror.
_BUNDLE, _HOSTS, _MIRROR = "source[bundle]", "source[hosts]", "source[mirror]"


def _kind(value: Any) -> str:
    """Which form a source is, so a refusal is that form's alone (not one line per form)."""
    if isinstance(value, dict):
        return _MIRROR if "mirror" in value else _HOSTS
    if isinstance(value, HostsSource | MirrorSource):
        return _HOSTS if isinstance(value, HostsSource) else _MIRROR
    return _BUNDLE


WeightsSource = Annotated[
    Annotated[Literal["bundle"], Tag(_BUNDLE)]
    | Annotated[HostsSource, Tag(_HOSTS)]
    | Annotated[MirrorSource, Tag(_MIRROR)],
    Discriminator(_kind),
]


def by_reference(source: object) -> bool:
    return isinstance(source, HostsSource | MirrorSource)

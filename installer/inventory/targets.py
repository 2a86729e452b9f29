"""The OS releases a bundle can be built for, and which one a host is (pure data and logic).

A target is one OS release on one architecture: its system CPython (exact micro version, since
markers such as redis's `python_full_version < "3.11.3"` depend on it), its glibc (the newest
manylinux tag its wheels may carry) and its archive suite (its OS packages come from its
distribution's own archive, installer/bundle/debs.py, or a folder). A bundle carries one
or more targets; each host receives and installs only its own (installer/bundle/layout.py).
The table sits with the inventory model, which validates target names against it.

x86_64 only for now. aarch64 (Grace Hopper) is a second arch of the same releases: its own
wheel resolve and uv binary, the same table otherwise (docs/airgap.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from installer.base.errors import InstallerError


@dataclass(frozen=True)
class Target:
    name: str  # what the inventory says: debian-12, ubuntu-24.04, ...
    os_id: str  # /etc/os-release ID
    version_id: str  # /etc/os-release VERSION_ID
    codename: str  # the release's suite in its distribution's archive (os_id's)
    python: str  # the system CPython, /usr/bin/python3, exact
    glibc: tuple[int, int]
    arch: str = "x86_64"
    system_python: str = "/usr/bin/python3"

    @property
    def python_minor(self) -> str:
        return ".".join(self.python.split(".")[:2])

    @property
    def cpython_tag(self) -> str:
        return "cp" + self.python_minor.replace(".", "")

    def as_manifest(self) -> dict[str, str]:
        return {
            "os": f"{self.os_id} {self.version_id}",
            "python": self.python,
            "glibc": ".".join(map(str, self.glibc)),
            "arch": self.arch,
        }


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("debian-12", "debian", "12", "bookworm", "3.11.2", (2, 36)),
        Target("debian-13", "debian", "13", "trixie", "3.13.5", (2, 41)),
        Target("ubuntu-22.04", "ubuntu", "22.04", "jammy", "3.10.12", (2, 35)),
        Target("ubuntu-24.04", "ubuntu", "24.04", "noble", "3.12.3", (2, 39)),
    )
}
NAMES = tuple(TARGETS)
# Inventories written before targets existed keep what they got.
DEFAULT = "debian-12"

# /etc/os-release IDs (and ID_LIKE words) of systems whose packages are RPMs, or that derive
# from such: their design is in docs/airgap.md; until it is built they are refused.
UNSUPPORTED_FAMILIES = {
    "rhel": "RHEL", "centos": "CentOS", "rocky": "Rocky Linux", "almalinux": "AlmaLinux",
    "fedora": "Fedora", "ol": "Oracle Linux", "kylin": "Kylin", "openeuler": "openEuler",
    "anolis": "Anolis OS", "opencloudos": "OpenCloudOS", "tencentos": "TencentOS",
    "amzn": "Amazon Linux", "sles": "SUSE", "opensuse-leap": "openSUSE",
}


def get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise InstallerError(f"unknown target {name!r}; use one of {', '.join(NAMES)}") from None


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release's KEY=value lines (values unquoted), as os-release(5) describes them."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        fields[key] = value
    return fields


def of_os_release(fields: dict[str, str]) -> Target | None:
    """The target a host with these os-release fields is; None for anything not in the table."""
    os_id, version = fields.get("ID", ""), fields.get("VERSION_ID", "")
    return next((t for t in TARGETS.values() if (t.os_id, t.version_id) == (os_id, version)), None)


def unsupported_family(fields: dict[str, str]) -> str | None:
    """The family name of an RPM-based (or derived) system, else None."""
    words = [fields.get("ID", "").lower(), *fields.get("ID_LIKE", "").lower().split()]
    return next((UNSUPPORTED_FAMILIES[w] for w in words if w in UNSUPPORTED_FAMILIES), None)


def judge_os(fields: dict[str, str], declared: str, carried: list[str] | None) -> list[str]:
    """Problems of a host whose /etc/os-release says `fields`, declared as target `declared`,
    for a bundle carrying `carried` (None: not known yet). Empty when the host fits."""
    pretty = fields.get("PRETTY_NAME") or f"{fields.get('ID', '?')} {fields.get('VERSION_ID', '?')}"
    family = unsupported_family(fields)
    if family is not None:
        return [
            f"OS {pretty} ({family} family) is not supported yet: only {', '.join(NAMES)} "
            "(RPM-based systems are designed in docs/airgap.md, not built)"
        ]
    found = of_os_release(fields)
    if found is None:
        return [f"OS {pretty} is not supported; supported: {', '.join(NAMES)}"]
    if found.name != declared:
        return [
            f"the inventory declares target {declared} but the host runs {pretty} ({found.name}); "
            f"set this host's target: {found.name} in the inventory, or use a {declared} host"
        ]
    if carried is not None and declared not in carried:
        return [
            f"the bundle carries no {declared} target (it has {', '.join(carried) or 'none'}); "
            f"rebuild it with `installer bundle build` from an inventory that gives a host target: {declared}"
        ]
    return []

"""Each host installs only the OS packages of its own groups; dependencies come along via apt."""

from installer.bundle import os_packages

PACKAGES = [
    {"name": "libnuma1", "version": "2.0.16-1", "file": "debs/libnuma1.deb", "groups": "serving"},
    {"name": "prometheus", "version": "2.42", "file": "debs/prometheus.deb", "groups": "monitoring"},
    {"name": "libc6", "version": "2.36", "file": "debs/libc6.deb", "groups": ""},
    {"name": "old", "version": "1", "file": "debs/old.deb"},  # a bundle from before groups
]


def test_a_host_gets_its_groups_packages_only() -> None:
    names = [p["name"] for p in os_packages.for_host(PACKAGES, ["serving"])]
    assert names == ["libnuma1"]
    both = [p["name"] for p in os_packages.for_host(PACKAGES, ["serving", "monitoring"])]
    assert both == ["libnuma1", "prometheus"]
    assert os_packages.for_host(PACKAGES, ["other"]) == []


def test_all_names_is_the_sorted_union() -> None:
    assert os_packages.all_names({"b": ["y", "x"], "a": ["x", "z"]}) == ["x", "y", "z"]

"""OS targets: which target a host is, from real /etc/os-release files, and what preflight says
about a host whose OS is not its declared target, not in the bundle, or not supported."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from installer.base.errors import InstallerError
from installer.inventory import targets
from installer.preflight import hosts as preflight

FIXTURES = Path(__file__).parents[1] / "fixtures" / "os-release"
GIB = 1024**3


def _fields(name: str) -> dict[str, str]:
    return targets.parse_os_release((FIXTURES / name).read_text())


def _probe(name: str, host_torch: str = "") -> dict[str, str]:
    """The preflight's own probe, run by sh here against a fixture os-release file."""
    env = {**os.environ, "PLI_OS_RELEASE": str(FIXTURES / name), "PLI_BUNDLE_DIR": "/nonexistent",
           "PLI_RELEASE_FILE": "/nonexistent", "PLI_HOST_TORCH": host_torch}
    out = subprocess.run(["sh", "-c", preflight._PROBE], env=env, capture_output=True, text=True, check=True)
    return preflight.parse_facts(out.stdout)


@pytest.mark.parametrize(
    ("fixture", "target", "python"),
    [
        ("debian-12", "debian-12", "3.11.2"),
        ("debian-13", "debian-13", "3.13.5"),
        ("ubuntu-22.04", "ubuntu-22.04", "3.10.12"),
        ("ubuntu-24.04", "ubuntu-24.04", "3.12.3"),
    ],
)
def test_each_release_is_its_target(fixture: str, target: str, python: str) -> None:
    found = targets.of_os_release(_fields(fixture))
    assert found is not None and found.name == target and found.python == python
    assert targets.judge_os(_fields(fixture), target, [target]) == []


def test_the_table_holds_each_releases_interpreter_and_glibc() -> None:
    assert {n: (t.python, t.glibc, t.codename) for n, t in targets.TARGETS.items()} == {
        "debian-12": ("3.11.2", (2, 36), "bookworm"),
        "debian-13": ("3.13.5", (2, 41), "trixie"),
        "ubuntu-22.04": ("3.10.12", (2, 35), "jammy"),
        "ubuntu-24.04": ("3.12.3", (2, 39), "noble"),
    }
    assert targets.DEFAULT == "debian-12"
    assert all(t.system_python == "/usr/bin/python3" for t in targets.TARGETS.values())
    with pytest.raises(InstallerError, match=re.escape("unknown target 'ubuntu-20.04'; use one of debian-12")):
        targets.get("ubuntu-20.04")


def test_a_rocky_host_is_not_supported_yet() -> None:
    fields = _fields("rocky-9")
    assert targets.of_os_release(fields) is None
    (problem,) = targets.judge_os(fields, "debian-12", ["debian-12"])
    assert problem.startswith("OS Rocky Linux 9.4 (Blue Onyx) (Rocky Linux family) is not supported yet")
    assert "docs/airgap.md" in problem


def test_a_host_whose_os_is_not_its_declared_target_is_refused_naming_both() -> None:
    (problem,) = targets.judge_os(_fields("ubuntu-24.04"), "debian-12", ["debian-12", "ubuntu-24.04"])
    assert problem == (
        "the inventory declares target debian-12 but the host runs Ubuntu 24.04.3 LTS (ubuntu-24.04); "
        "set this host's target: ubuntu-24.04 in the inventory, or use a debian-12 host"
    )


def test_a_host_whose_target_the_bundle_lacks_gets_one_line_naming_the_rebuild() -> None:
    (problem,) = targets.judge_os(_fields("debian-13"), "debian-13", ["debian-12"])
    assert problem == (
        "the bundle carries no debian-13 target (it has debian-12); rebuild it with "
        "`installer bundle build` from an inventory that gives a host target: debian-13"
    )


def _needs(**kw: object) -> preflight.Needs:
    return preflight.Needs(0, 0, 0, 0, "/b", "/r", **kw)  # type: ignore[arg-type]


def test_preflight_reports_os_python_glibc_and_kernel_from_its_probe() -> None:
    facts = _probe("ubuntu-24.04")
    assert (facts["os_id"], facts["os_version"], facts["os_like"]) == ("ubuntu", "24.04", "debian")
    assert facts["os_pretty"] == "Ubuntu 24.04.3 LTS"
    assert facts["python_full"].count(".") == 2 and facts["system_python"].count(".") == 1
    assert facts["glibc"].startswith("2.") and facts["kernel"] == os.uname().release
    needs = _needs(host_targets={"h1": "debian-12"}, carried=("debian-12", "ubuntu-24.04"))
    (problem,) = preflight.judge_os(facts, needs, "h1")
    assert "declares target debian-12 but the host runs Ubuntu 24.04.3 LTS" in problem


def test_preflight_refuses_rocky_before_anything_else() -> None:
    (problem,) = preflight.judge_os(_probe("rocky-9"), _needs(), "h1")
    assert "(Rocky Linux family) is not supported yet" in problem


def test_preflight_checks_the_system_python_against_the_target() -> None:
    facts = {"os_id": "ubuntu", "os_version": "24.04", "system_python": "3.12"}
    assert preflight.judge_os(facts, _needs(host_targets={"h1": "ubuntu-24.04"}), "h1") == []
    (missing,) = preflight.judge_os({**facts, "system_python": ""}, _needs(), "h1")
    assert missing.startswith("/usr/bin/python3 is missing: the gateway's environment is made from it")
    (other,) = preflight.judge_os({**facts, "system_python": "3.11"}, _needs(), "h1")
    assert "/usr/bin/python3 is Python 3.11, not ubuntu-24.04's 3.12" in other


def test_preflight_checks_the_host_torch_python_from_the_bundle() -> None:
    facts = {"os_id": "ubuntu", "os_version": "24.04", "system_python": "3.12"}
    needs = _needs(host_torch="/opt/torch/.venv", host_torch_python="3.12", host_torch_hosts=("h1",))
    assert preflight.judge_os(facts, needs, "monitor") == []  # runs no engine: needs no torch
    (missing,) = preflight.judge_os(facts, needs, "h1")
    assert missing.startswith("engine.host_torch: /opt/torch/.venv/bin/python3 is missing or does not run")
    (other,) = preflight.judge_os({**facts, "host_torch_python": "3.11"}, needs, "h1")
    assert "is Python 3.11, the bundle's vLLM wheels need 3.12" in other
    assert preflight.judge_os({**facts, "host_torch_python": "3.12"}, needs, "h1") == []


def test_the_probe_reads_the_host_torch_interpreter(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    os.symlink("/usr/bin/python3", tmp_path / "bin" / "python3")
    facts = _probe("debian-12", host_torch=str(tmp_path))
    assert facts["host_torch_python"] == facts["system_python"]
    assert "host_torch_python" not in _probe("debian-12")

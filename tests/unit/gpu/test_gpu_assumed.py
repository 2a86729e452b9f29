"""The package-test-only probe (doctor facts --assume-gpus): GPUs from the spec, the "running"
driver from dpkg's status file, held or not."""

from pathlib import Path

import pytest

from installer.gpu import doctor

STATUS = """Package: libc6
Status: install ok installed
Version: 2.36-9+deb12u14

Package: nvidia-driver-570-server-open
Status: hold ok installed
Priority: optional
Description: test
 continuation: not a field
Version: 570.195.03-0ubuntu1

Package: nvidia-driver-550-server
Status: deinstall ok config-files
Version: 550.163.01-0ubuntu1
"""


def test_driver_package_is_read_held_or_not_and_removed_ones_ignored(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(STATUS)
    assert doctor.installed_driver_package(str(status)) == ("nvidia-driver-570-server-open", "570.195.03")
    status.write_text(STATUS.replace("hold ok installed", "install ok installed"))
    assert doctor.installed_driver_package(str(status))[1] == "570.195.03"
    status.write_text(STATUS.split("\n\n")[0] + "\n\n" + STATUS.split("\n\n")[2])
    assert doctor.installed_driver_package(str(status)) == ("", "")


def test_assumed_facts_without_and_with_a_driver_package(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"count": 2, "generation": "hopper", "nvswitches": 2, "cuda_driver_version": "12.8"}
    monkeypatch.setattr(doctor, "installed_driver_package", lambda: ("", ""))
    f = doctor.assumed_facts(spec)
    assert f["assumed"] and f["gpu_count"] == 2 and f["generation"] == "hopper" and f["nvswitch_count"] == 2
    assert f["gpus"] == [] and not f["driver"]["loaded"] and f["cuda_driver_version"] == ""
    monkeypatch.setattr(doctor, "installed_driver_package", lambda: ("nvidia-driver-570-server-open", "570.195.03"))
    f = doctor.assumed_facts(spec)
    assert [g["driver_version"] for g in f["gpus"]] == ["570.195.03"] * 2
    assert f["driver"] | {"nvidia_smi": "", "nvidia_smi_error": ""} == {
        "loaded": True, "version": "570.195.03", "kernel_modules": "open", "module_on_disk": "570.195.03",
        "package": "nvidia-driver-570-server-open", "nvidia_smi": "", "nvidia_smi_error": "",
    }
    assert f["cuda_driver_version"] == "12.8"

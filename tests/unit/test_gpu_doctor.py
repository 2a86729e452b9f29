"""Parsing what nvidia-smi, /proc/driver/nvidia and the kernel log print (captured fixtures)."""

from pathlib import Path

import pytest

from installer.gpu import doctor

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def test_proc_version_open_and_proprietary() -> None:
    open_mod = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(dvs-builder@U22-I3-AE18-23-3)  Thu Oct 16 21:51:39 UTC 2025\nGCC version:  gcc 12.3.0\n"
    )
    assert doctor.parse_proc_version(open_mod) == {
        "version": "580.159.04",
        "kernel_modules": "open",
    }
    prop = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    )
    assert doctor.parse_proc_version(prop) == {
        "version": "535.104.05",
        "kernel_modules": "proprietary",
    }
    assert doctor.parse_proc_version("") == {"version": "", "kernel_modules": ""}


def test_query_csv_with_not_available_fields() -> None:
    (gpu,) = doctor.parse_smi_csv(
        (FIXTURES / "synthetic_v100_r535" / "query.csv").read_text(), doctor.SMI_FIELDS
    )
    assert gpu["name"] == "Tesla V100-SXM2-32GB" and gpu["memory.total"] == 32768
    assert gpu["compute_cap"] == "7.0" and gpu["mig.mode.current"] is None  # [N/A]
    assert gpu["power.draw"] == 41.25 and gpu["driver_version"] == "535.104.05"


def test_smi_q_cuda_version_and_fabric_states() -> None:
    q = doctor.parse_smi_q((FIXTURES / "synthetic_hgx_h100_r570" / "q.txt").read_text())
    assert q["cuda_version"] == "12.8" and q["driver_version"] == "570.133.20"
    assert q["fabric_states"].count("Completed") == 7 and q["fabric_states"][3] == "In Progress"


def test_checks_flag_ecc_errors_temperature_and_persistence() -> None:
    gpus = doctor.parse_smi_csv(
        (FIXTURES / "synthetic_a100_r535" / "query.csv").read_text(), doctor.SMI_FIELDS
    )
    facts = {
        "gpus": gpus,
        "pci_gpus": [],
        "nvswitch_count": 0,
        "fabric_states": [],
        "cuda_driver_version": "12.2",
        "driver": {
            "version": "535.183.01",
            "kernel_modules": "open",
            "nvidia_smi": "x",
            "nvidia_smi_error": "",
        },
    }
    driver, gpu0, gpu1 = doctor.check_smi(facts)
    assert driver["status"] == "ok" and "535.183.01" in driver["detail"]
    assert gpu0["status"] == "warn" and "persistence mode off" in gpu0["detail"]
    assert gpu1["status"] == "fail" and "2 uncorrected ECC errors" in gpu1["detail"]
    assert "88 C > 85 C" in gpu1["detail"]


def test_nvswitch_fabric_not_completed_fails() -> None:
    d = FIXTURES / "synthetic_hgx_h100_r570"
    facts = {
        "gpus": doctor.parse_smi_csv((d / "query.csv").read_text(), doctor.SMI_FIELDS),
        "pci_gpus": [],
        "nvswitch_count": 4,
        "cuda_driver_version": "12.8",
        "fabric_states": doctor.parse_smi_q((d / "q.txt").read_text())["fabric_states"],
        "driver": {
            "version": "570.133.20",
            "kernel_modules": "open",
            "nvidia_smi": "x",
            "nvidia_smi_error": "",
        },
    }
    fabric = doctor.check_smi(facts)[-1]
    assert fabric["name"] == "fabric" and fabric["status"] == "fail"
    assert "start nvidia-fabricmanager" in fabric["detail"]


def test_no_gpu_is_a_skip_and_an_unlisted_gpu_a_failure() -> None:
    none = {"gpus": [], "pci_gpus": [], "driver": {"nvidia_smi": "", "nvidia_smi_error": ""}}
    assert doctor.check_smi(none) == [
        {"name": "nvidia-smi", "status": "skip", "detail": "no NVIDIA GPU detected"}
    ]
    broken = {
        "gpus": [],
        "pci_gpus": [{"bus_id": "0000:3b:00.0"}],
        "driver": {
            "nvidia_smi": "/usr/bin/nvidia-smi",
            "nvidia_smi_error": "NVIDIA-SMI has failed because it couldn't communicate with "
            "the NVIDIA driver",
        },
    }
    (c,) = doctor.check_smi(broken)
    assert c["status"] == "fail" and "couldn't communicate" in c["detail"]


def test_xid_lines_critical_and_not() -> None:
    xids = doctor.parse_xids((FIXTURES / "dmesg_xid.txt").read_text())
    assert [(x["bus_id"], x["xid"], x["critical"]) for x in xids] == [
        ("0000:3b:00", 13, False),
        ("0000:3b:00", 13, False),
        ("0000:86:00", 79, True),
    ]
    assert xids[2]["message"].endswith("GPU has fallen off the bus.")


@pytest.mark.parametrize(
    ("text", "cpus"), [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", [])]
)
def test_cpulist(text: str, cpus: list[int]) -> None:
    assert doctor.parse_cpulist(text) == cpus


@pytest.mark.parametrize(
    ("device_id", "gen"),
    [
        (0x2335, "hopper"),
        (0x2330, "hopper"),
        (0x20B2, "ampere"),
        (0x2236, "ampere"),
        (0x26B9, "ada"),
        (0x27B8, "ada"),
        (0x1EB8, "turing"),
        (0x1DB5, "volta"),
        (0x15F8, "pascal"),
        (0x2901, "blackwell"),
        (0x102D, "kepler"),
        (0x0001, ""),
    ],
)
def test_generation_from_pci_device_id(device_id: int, gen: str) -> None:
    """H200 2335, H100 2330, A100 20b2, A10 2236, L40S 26b9, L4 27b8, T4 1eb8, V100 1db5,
    P100 15f8, B200 2901, K80 102d (PCI ID database, vendor 10de)."""
    assert doctor.generation_from_pci(device_id) == gen


def test_sysfs_scan_finds_gpus_and_nvswitches(tmp_path: Path) -> None:
    def dev(bus: str, cls: str, device: str, numa: str = "1") -> None:
        d = tmp_path / bus
        d.mkdir()
        for name, value in (
            ("vendor", "0x10de"),
            ("class", cls),
            ("device", device),
            ("numa_node", numa),
            ("local_cpulist", "64-127"),
        ):
            (d / name).write_text(value + "\n")

    dev("0000:9a:00.0", "0x030200", "0x2335")  # H200 (3D controller)
    dev("0000:05:00.0", "0x068000", "0x22a3")  # NVSwitch (bridge)
    (tmp_path / "0000:00:00.0").mkdir()
    (tmp_path / "0000:00:00.0" / "vendor").write_text("0x8086\n")
    devs = doctor.pci_devices(str(tmp_path))
    assert [(d["kind"], d["generation"], d["numa_node"]) for d in devs] == [
        ("nvswitch", "", 1),
        ("gpu", "hopper", 1),
    ]


def test_captured_h200() -> None:
    """What nvidia-smi and /proc printed on the project's H200 (tests/gpu/capture_fixtures.sh)."""
    d = FIXTURES / "h200_r580"
    (gpu,) = doctor.parse_smi_csv((d / "query.csv").read_text(), doctor.SMI_FIELDS)
    assert gpu["name"] == "NVIDIA H200" and gpu["memory.total"] == 143771
    assert gpu["compute_cap"] == "9.0" and gpu["driver_version"] == "580.159.04"
    assert (gpu["ecc.mode.current"], gpu["persistence_mode"], gpu["mig.mode.current"]) == (
        "Enabled",
        "Enabled",
        "Disabled",
    )
    q = doctor.parse_smi_q((d / "q.txt").read_text())
    assert (q["cuda_version"], q["driver_version"], q["fabric_states"]) == (
        "13.0",
        "580.159.04",
        ["N/A"],
    )
    proc = doctor.parse_proc_version((d / "proc_version.txt").read_text())
    assert proc == {"version": "580.159.04", "kernel_modules": "open"}
    assert doctor.generation_from_cc(gpu["compute_cap"]) == "hopper"

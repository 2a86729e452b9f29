"""`installer doctor`'s fan-out (installer/flows/gpu_checks.py): the real doctor script, copied and run
through each host's ssh argv, all hosts at once.

A "host" here runs the argv's remote command with `bash -c` on this machine instead of over
ssh: the same mktemp/cat/python3 command line and the same doctor run, so what comes back is a
real result (on a machine without a GPU, "skip"), and a host whose ssh fails is a failed host.
"""

from pathlib import Path

import pytest

from installer.flows import gpu_checks
from installer.hosts.ssh import Target
from tests.support.local_hosts import DownHost, HereHost, SilentHost


def _host(kind: type[Target], name: str) -> Target:
    return kind(name, "10.0.0.9", "root", 22, None, None)


def test_a_failing_host_is_named_while_the_others_report() -> None:
    hosts = [_host(HereHost, "a"), _host(DownHost, "b"), _host(HereHost, "c")]
    results = gpu_checks.check_hosts(hosts, gpu_checks.Options(gemm=False, nccl=False).argv())
    assert [r["host"] for r in results] == ["a", "b", "c"]
    a, b, c = results
    # the doctor ran to its end on the two reachable hosts: their facts and checks came back
    assert "error" not in a and a["facts"] == c["facts"] and a["checks"] and a["status"] == c["status"]
    assert b == {"host": "b", "status": "fail",
                 "error": "ssh rc 255: ssh: connect to host 10.0.0.9 port 22: No route to host"}
    run = gpu_checks.DoctorRun("demo", results, Path("runs"))
    with pytest.raises(gpu_checks.GPUCheckError, match=r"^1 of 3 host\(s\) failed their GPU checks$") as err:
        run.raise_for_failures()
    assert err.value.details == ["b: ssh rc 255: ssh: connect to host 10.0.0.9 port 22: No route to host"]


def test_a_host_that_does_not_answer_fails_alone_after_the_timeout() -> None:
    # 5 s: the answering host runs the real doctor, which a loaded 2-core machine can hold up past 1 s
    results = gpu_checks.check_hosts([_host(SilentHost, "slow"), _host(HereHost, "ok")], ["check"], timeout=5)
    assert results[0] == {"host": "slow", "status": "fail", "error": "no answer within 5 s"}
    assert "error" not in results[1] and results[1]["facts"]


def test_the_doctor_runs_isolated_from_modules_planted_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module another user planted where Python would look first (the script's folder, or a
    PYTHONPATH the SSH user's environment sets) never runs: the doctor runs from a folder of its
    own with `python3 -I`."""
    plant, marker = tmp_path / "plant", tmp_path / "planted-ran"
    plant.mkdir()
    for name in ("json", "argparse", "glob", "subprocess"):
        (plant / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('{name}')\n")
    monkeypatch.setenv("PYTHONPATH", str(plant))
    monkeypatch.setenv("TMPDIR", str(plant))  # mktemp -d makes the doctor's folder in here
    [result] = gpu_checks.check_hosts([_host(HereHost, "a")], gpu_checks.Options(gemm=False, nccl=False).argv())
    assert "error" not in result and result["facts"]
    assert not marker.exists(), f"a planted module ran: {marker.read_text()}"
    # and its folder is gone afterwards
    assert sorted(p.name for p in plant.iterdir()) == ["argparse.py", "glob.py", "json.py", "subprocess.py"]

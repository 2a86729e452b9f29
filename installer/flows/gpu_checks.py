"""`installer doctor`: the GPU checks of installer/gpu/doctor.py, run on every inventory host
over SSH (all at once) or on this machine, with the results kept in the run log.

The doctor itself runs on the hosts with the standard library only; this module is its
control-machine side: it copies the script over each host's SSH connection, runs it, and reads
back the one JSON line it prints.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.base.errors import InstallerError
from installer.base.runlog import RunLog
from installer.gpu import doctor as gpu_doctor
from installer.hosts import remote
from installer.hosts.ssh import Target, targets
from installer.inventory import Inventory
from installer.inventory.topology import HOST_LAYOUT

DOCTOR_SCRIPT = Path(gpu_doctor.__file__)
# The engine's environment has torch with CUDA once `installer up` has installed a release.
HOST_TORCH_PYTHON = f"{HOST_LAYOUT['pli_root']}/current/venv/bin/python"
# Room for the GEMM and the all-reduce on every GPU of a large host.
HOST_TIMEOUT_S = 900.0


class GPUCheckError(InstallerError):
    """One or more hosts failed their GPU checks."""


@dataclass(frozen=True)
class Options:
    gemm: bool = True
    nccl: bool = True
    min_tflops: float = 0.0

    def argv(self) -> list[str]:
        """The doctor's command line on a host."""
        args = ["check", "--min-tflops", str(self.min_tflops), "--torch-python", HOST_TORCH_PYTHON]
        return args + ([] if self.gemm else ["--no-gemm"]) + ([] if self.nccl else ["--no-nccl"])


@dataclass(frozen=True)
class DoctorRun:
    deployment: str
    results: list[dict[str, Any]]  # one per host, in inventory order; "error" when it gave none
    log_dir: Path

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["status"] == "fail"]

    def raise_for_failures(self) -> None:
        """GPUCheckError naming each failed host and what failed on it."""
        if not self.failed:
            return
        raise GPUCheckError(
            f"{len(self.failed)} of {len(self.results)} host(s) failed their GPU checks",
            [
                f"{r['host']}: "
                + (
                    r.get("error")
                    or "; ".join(f"{c['name']}: {c['detail']}" for c in r["checks"] if c["status"] == "fail")
                )
                for r in self.failed
            ],
        )


def check_host(t: Target, args: list[str], timeout: float = HOST_TIMEOUT_S) -> dict[str, Any]:
    """Copy the doctor to a temporary file on the host, run it, remove it; its JSON result.

    The script goes into a folder of its own (mktemp -d: 0700) and runs isolated (`python3 -I`):
    Python puts a script's folder first on the import path and reads PYTHON* variables, so a
    `json.py` another user left in /tmp would otherwise run as the SSH user (root).
    """
    command = (
        'd=$(mktemp -d) && cat > "$d/doctor.py" && '
        f'python3 -I "$d/doctor.py" {shlex.join(args)}; rc=$?; rm -rf "$d"; exit $rc'
    )
    r = remote.run_one(t, command, stdin=DOCTOR_SCRIPT.read_bytes(), timeout=timeout)
    if r.rc == remote.NO_ANSWER and not r.stdout:
        return {"host": t.name, "status": "fail", "error": r.stderr}
    out = r.text.strip().splitlines()
    if not out or not out[-1].startswith("{"):
        err = (r.stderr.splitlines() or ["no output"])[-1]
        return {"host": t.name, "status": "fail", "error": f"ssh rc {r.rc}: {err}"}
    result: dict[str, Any] = json.loads(out[-1])
    result["host"] = t.name
    return result


def check_hosts(hosts: Sequence[Target], args: list[str], timeout: float = HOST_TIMEOUT_S) -> list[dict[str, Any]]:
    """Every host's result, all hosts at once; a host that gives none is a failed one, by name."""
    return remote.each(hosts, lambda t: check_host(t, args, timeout))


def doctor(inv: Inventory | None, options: Options, json_out: Path | None = None) -> DoctorRun:
    """Check the GPUs of every host of `inv` (None: this machine), keep the results in the run
    log (and in `json_out`)."""
    if inv is None:
        results = [gpu_doctor.check(gemm=options.gemm, nccl=options.nccl, min_tflops=options.min_tflops)]
        deployment = "local"
    else:
        results = check_hosts(targets(inv), options.argv())
        deployment = inv.deployment
    log = RunLog("doctor", deployment)
    log.write_summary({"hosts": results})
    if json_out:
        json_out.write_text(json.dumps({"hosts": results}, indent=1) + "\n")
    return DoctorRun(deployment, results, log.dir)

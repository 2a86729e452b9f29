"""The GPU proof's inventory (tests/gpu/host/h200.yml) as the proof uses it, without a GPU or a
download: `installer validate`, `installer plan` up to the hosts, the engines laid out for the
H200 preflight probed there, and what `installer bundle build` would carry for it. A change that
would stop tests/gpu/host/stage.sh or h200_up.sh fails here, not on a leased GPU.

The site folder is stage.sh's: the inventory beside its key, known_hosts, the model modelmaker
makes and the monitoring tarballs (here tiny ones of the upstream layout).
"""

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement
from typer.testing import CliRunner

from installer.bundle import build, planning, wheels
from installer.cli import _register, app
from installer.cli import terraform as tf_cli
from installer.inventory import load_inventory
from installer.inventory.targets import TARGETS
from installer.planning import plan as deployment_plan
from installer.preflight import gpu as preflight_gpu
from installer.preflight import hosts as preflight
from installer.preparation.inventory_checks import check_inventory
from tests.support.monitoring_tarballs import VERSIONS, tarball

HOST = Path(__file__).parents[2] / "gpu" / "host"
PROBE = Path(__file__).parents[1] / "fixtures" / "gpu" / "h200_r580" / "preflight_probe.txt"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model as stage.sh makes it (`python -m installer.modelmaker OUT --kind deepseek-fp8`)."""
    out = tmp_path_factory.mktemp("proof") / "model"
    subprocess.run([sys.executable, "-m", "installer.modelmaker", str(out), "--kind", "deepseek-fp8"],
                   check=True, capture_output=True)
    return out


@pytest.fixture
def site(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    for env in ("INSTALLER_UBUNTU_MIRROR", "INSTALLER_UBUNTU_KEYRING"):
        monkeypatch.delenv(env, raising=False)
    shutil.copy(HOST / "h200.yml", tmp_path / "h200.yml")
    (tmp_path / "id_h200").write_text("not a key: nothing connects\n")
    (tmp_path / "known_hosts").write_text("")
    shutil.copytree(model, tmp_path / "model")
    (tmp_path / "tarballs").mkdir()
    for component, version in VERSIONS.items():
        tarball(tmp_path / "tarballs", component, version)
    _register()
    return tmp_path / "h200.yml"


def test_validate_accepts_the_proofs_inventory(site: Path) -> None:
    r = CliRunner().invoke(app, ["validate", "-i", str(site)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "OK" in r.output and "deployment 'h200', 1 host(s), model 'tiny-deepseek' on gpu" in r.output


def test_plan_reaches_the_hosts_with_the_engine_laid_out_for_the_probed_h200(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `up` plans with once preflight has probed the H200 (its probe, captured there).
    inv = load_inventory(site)
    check_inventory(inv)
    facts = preflight.parse_facts(PROBE.read_text())
    laid_out = preflight_gpu.with_probed_hardware(inv, {"h200": facts})
    assert (laid_out.gpu.type, laid_out.gpu.count) == ("h200", 1)
    probed = preflight_gpu.plan_probed(laid_out, lambda i: deployment_plan.build(i, probed=True))
    ((host, _unit, argv),) = probed.engine_commands()
    assert host == "h200" and argv[argv.index("--max-model-len") + 1] == "2048"
    # The DeepSeek checkpoint's profile: both parsers, MTP on the GPU, its fp8 weights as they are.
    flags = " ".join(argv)
    assert "--reasoning-parser deepseek_v3" in flags
    assert "--tool-call-parser deepseek_v3 --enable-auto-tool-choice" in flags
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":1}'
    assert "--quantization" not in argv
    assert probed.redis is not None and probed.redis.host == "h200"
    # The machine is the target the inventory declares, with its Python.
    assert (facts["os_id"], facts["os_version"], facts["python_full"]) == (
        "ubuntu",
        "24.04",
        TARGETS["ubuntu-24.04"].python,
    )

    # `installer plan` up to the hosts' part (a bundle, preflight and Ansible's check mode over
    # SSH: the GPU machine's), which answers with that plan.
    reached: list[bool] = []

    def hosts_part(**kw: object) -> SimpleNamespace:
        reached.append(bool(kw["check"]))
        return SimpleNamespace(deployment_plan=probed)

    monkeypatch.setattr(tf_cli, "run_up", hosts_part)
    r = CliRunner().invoke(app, ["plan", "-i", str(site)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert reached == [True]


def test_the_bundle_plan_for_the_proof_needs_nothing_the_build_machine_lacks(site: Path) -> None:
    inv = load_inventory(site)
    contents = planning.plan(inv)
    (target,) = contents.targets
    assert target.target.name == "ubuntu-24.04"
    # The engine: vLLM from the checked-in lock, for the hosts' own torch (engine.host_torch)
    # of the lock's Python, which must be the image's.
    engine = target.engine
    assert engine is not None and engine.locked
    assert engine.host_torch == (engine.python, "2.11.0") and engine.python == TARGETS["ubuntu-24.04"].python_minor
    names = {Requirement(r).name for r in engine.requirements}
    assert "vllm" in names and not {n for n in names if wheels.HOST_TORCH_PROVIDES.fullmatch(n)}
    assert {"fastapi", "redis"} <= {Requirement(r).name for r in target.gateway}
    # OS packages: Redis on the first serving host (the only one), from Ubuntu's own archive.
    os_debs = target.os_packages
    assert dict(os_debs.groups) == {"redis": ["redis-server"]}
    assert os_debs.folder is None and os_debs.archive.distro == "ubuntu"
    assert os_debs.source() == "http://archive.ubuntu.com/ubuntu noble noble-updates noble-security (main universe)"
    assert target.nvidia == {}  # the image has its driver; no gpu.packages_dir
    assert [m.served_name for m in contents.models] == ["tiny-deepseek"]
    assert contents.monitoring_tarballs == site.parent / "tarballs" and not contents.terraform
    # The bundle's cache key is computed from the same inputs, without fetching.
    assert build.bundle_inputs(inv)["debs"] == {"ubuntu-24.04": {"redis": ["redis-server"]}}

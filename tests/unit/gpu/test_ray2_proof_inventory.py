"""The two-host Ray proof's inventory (tests/gpu/host/ray2.yml, #36 item 3) as
ray_two_hosts.sh uses it, without a GPU: `installer validate`, the plan's Ray units and engine
(PP 2 pinned by gpu.pipeline_parallel_size on one GPU per host, a layer per stage), `installer
plan` up to the hosts, and Ray in the bundle for the hosts' own torch. A change that would stop
the script fails here, not on a leased GPU. Also the pin's refusal when there are too few hosts."""

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement
from typer.testing import CliRunner

from installer.base.errors import InstallerError
from installer.bundle import planning
from installer.cli import _register, app
from installer.cli import terraform as tf_cli
from installer.flows import gpu_fit
from installer.gpu import ray_ports
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory
from tests.support.monitoring_tarballs import VERSIONS, tarball

HOST = Path(__file__).parents[2] / "gpu" / "host"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab's 2-layer Llama as stage_ray2.sh makes it (`python -m installer.modelmaker OUT`)."""
    out = tmp_path_factory.mktemp("ray2") / "model"
    subprocess.run([sys.executable, "-m", "installer.modelmaker", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture
def site(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copy(HOST / "ray2.yml", tmp_path / "ray2.yml")
    (tmp_path / "id_ray2").write_text("not a key: nothing connects\n")
    (tmp_path / "known_hosts").write_text("")
    shutil.copytree(model, tmp_path / "model")
    (tmp_path / "tarballs").mkdir()
    for component, version in VERSIONS.items():
        tarball(tmp_path / "tarballs", component, version)
    _register()
    return tmp_path / "ray2.yml"


def test_validate_accepts_the_two_host_inventory(site: Path) -> None:
    r = CliRunner().invoke(app, ["validate", "-i", str(site)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "deployment 'ray2', 2 host(s), model 'tiny-llama' on gpu" in r.output


def test_the_plan_puts_a_ray_head_with_the_engine_on_h0_and_a_worker_on_h1(site: Path) -> None:
    plan = check_inventory(load_inventory(site))
    h0, h1 = plan.hosts
    assert h0.ray is not None and h1.ray is not None
    assert (h0.ray.role, h1.ray.role) == ("head", "worker")
    assert f"--address=10.36.0.2:{ray_ports.GCS_PORT}" in h1.ray.argv
    assert "--node-ip-address=10.36.0.3" in h1.ray.argv and "--num-gpus=1" in h1.ray.argv
    ((engine,), ()) = (h0.engines, h1.engines)  # the worker host runs no engine of its own
    argv = engine.argv
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.40"  # both stages share one GPU
    env = dict(engine.env)
    # NCCL's send/recv over the hosts' veth; vLLM copies NCCL_* to its Ray workers, GLOO_* on request
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"] == "GLOO_SOCKET_IFNAME"
    assert env["RAY_ADDRESS"] == f"10.36.0.2:{ray_ports.GCS_PORT}"
    assert engine.devices == ""  # Ray hands out the GPUs


def test_installer_plan_prints_the_pinned_layout_and_reaches_the_hosts(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = load_inventory(site)
    found = gpu_fit.fit(inv)
    assert found is not None and found.tuned is not None
    spread = found.layout()
    assert spread is not None and (spread.tp, spread.pp) == (1, 2)
    (h0, h1) = spread.placements
    assert (h0.host, h0.address, h0.layers, h1.host, h1.layers) == ("h0", "10.36.0.2", (0, 1), "h1", (1, 2))
    assert any("set in the inventory (gpu.pipeline_parallel_size)" in w for w in spread.why), spread.why

    reached: list[bool] = []

    def hosts_part(**kw: object) -> SimpleNamespace:
        reached.append(bool(kw["check"]))
        return SimpleNamespace(deployment_plan=check_inventory(inv))

    monkeypatch.setattr(tf_cli, "run_up", hosts_part)
    r = CliRunner().invoke(app, ["plan", "-i", str(site)], env={"COLUMNS": "240"})
    assert r.exit_code == 0, r.output
    assert reached == [True]
    assert "TP 1 x PP 2" in r.output and "gpu.pipeline_parallel_size" in r.output


def test_the_bundle_for_the_hosts_torch_carries_ray(site: Path) -> None:
    (target,) = planning.plan(load_inventory(site)).targets
    engine = target.engine
    assert engine is not None and engine.locked and engine.host_torch is not None
    pins = {Requirement(r).name: str(Requirement(r).specifier) for r in engine.requirements}
    assert pins["ray"] == "==2.58.0" and pins["vllm"] == "==0.26.0"
    assert {"click", "msgpack"} <= set(pins)  # ray's requirements the lock had not


@pytest.mark.parametrize(("pp", "why"), [(3, "only 2 serving host(s)")])
def test_a_pipeline_longer_than_the_hosts_is_refused(site: Path, pp: int, why: str) -> None:
    data = yaml.safe_load(site.read_text())
    data["gpu"]["pipeline_parallel_size"] = pp
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InstallerError) as err:
        check_inventory(load_inventory(site))
    text = str(err.value) + " ".join(getattr(err.value, "hints", []) or [])
    assert f"gpu.pipeline_parallel_size {pp}" in text and why in text, text

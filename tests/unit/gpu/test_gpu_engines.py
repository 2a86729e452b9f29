"""Engines per host from the tuner (installer/planning/engines.py) in the deployment plan, rendered into
the engine role's variables and through the role's real preflight and templates
(tests/support/engine_role.py): several engines per GPU host with CUDA_VISIBLE_DEVICES and
CPUAffinity, Ray units for a model larger than a host, and the CPU case unchanged."""

import json
from pathlib import Path
from typing import Any

import pytest

from installer.ansible import render
from installer.gpu import planner
from installer.gpu.tuner import TuneError
from installer.inventory.models import Inventory
from installer.planning import engines
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from tests.support.engine_role import render_role, rendered_vars


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def inventory(tmp: Path, preset: str = "", hosts: int = 1, **gpu: Any) -> Inventory:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(planner.PRESETS[preset] if preset else {}))
    return Inventory.model_validate({
        "deployment": "demo",
        "model": {"path": str(model), "served_name": "m"},
        "hosts": [{"name": f"h{i}", "address": f"10.0.0.{i + 1}"} for i in range(hosts)],
        "engine": {"device": "gpu" if gpu else "cpu", "max_model_len": 8192},
        **({"gpu": gpu} if gpu else {}),
    })


def inventory_with(tmp: Path, **engine: Any) -> Inventory:
    """One CPU host; `engine` settings added to the engine section."""
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo", "model": {"path": str(model), "served_name": engine.pop("served_name", "m")},
        "hosts": [{"name": "h0", "address": "10.0.0.1"}], "engine": {"device": "cpu", **engine},
    })


def test_cpu_and_undescribed_gpu_hosts_run_the_one_engine_of_old(tmp_path: Path) -> None:
    for inv in (inventory(tmp_path), inventory(tmp_path, cuda="13.0")):
        p = deployment_plan.build(inv)
        (engine,) = p.hosts[0].engines
        assert (engine.name, engine.unit, engine.port, engine.devices, engine.cpus) == (
            "engine", "private-llm-engine", 8000, "", "")
        assert p.hosts[0].ray is None and p.tuned is None
        host = render.hosts_yaml(p)["all"]["hosts"]["h0"]
        assert [e["argv"] for e in host["engine_instances"]] == [list(engine.argv)] and host["engine_ray"] == {}


def test_a_small_model_on_eight_gpus_runs_eight_pinned_engines(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "deepseek-r1-distill-qwen-7b", type="h200", count=8, numa_nodes=2)
    p = deployment_plan.build(inv)
    found = p.hosts[0].engines
    assert [(e.unit, e.port, e.devices) for e in found] == [
        ("private-llm-engine", 8000, "0"), *((f"private-llm-engine-{i}", 8000 + i, str(i)) for i in range(1, 8))
    ]
    # 2 NUMA nodes of 64 CPUs (HostHardware.of_type: 16 per GPU); 4 engines share each node
    assert [e.cpus for e in found[:5]] == ["0-15", "16-31", "32-47", "48-63", "64-79"]
    assert found[0].tuned_args[:2] == ("--tensor-parallel-size", "1")
    # PyTorch's sampler unless the inventory asks for FlashInfer's (no kernel build at first start)
    assert dict(found[0].env) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    chosen = inv.model_copy(update={"engine": inv.engine.model_copy(update={"flashinfer_sampler": True})})
    assert dict(deployment_plan.build(chosen).hosts[0].engines[0].env)["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    host = render.hosts_yaml(p)["all"]["hosts"]["h0"]
    assert len(host["engine_instances"]) == 8 and host["engine_ray"] == {}
    # Every gateway routes to all eight, and drains and metrics name them the same way.
    names = p.engine_names("h0")
    assert names == ("h0", *(f"h0-{i}" for i in range(1, 8)))
    assert [u.name for u in p.upstreams] == list(names)
    assert [u.url.rsplit(":", 1)[1] for u in p.upstreams] == [str(8000 + i) for i in range(8)]


def test_a_model_larger_than_a_host_gets_a_ray_head_and_worker(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "deepseek-v3", hosts=2, type="h100", count=8)
    p = deployment_plan.build(inv)
    head, worker = p.hosts
    (engine,) = head.engines
    assert "--pipeline-parallel-size" in engine.argv and engine.devices == ""
    assert dict(engine.env)["RAY_ADDRESS"] == f"10.0.0.1:{engines.RAY_PORT}"
    assert worker.engines == ()
    h, w = head.ray, worker.ray
    assert h and h.role == "head" and f"--port={engines.RAY_PORT}" in h.argv and h.node_ip == "10.0.0.1"
    assert w and w.role == "worker" and f"--address=10.0.0.1:{engines.RAY_PORT}" in w.argv
    # the head's address, never its inventory name (Ray wants head_ip:port), and every port pinned
    assert not any(a.startswith("--address=h0") for a in w.argv)
    assert "--node-manager-port=6391" in w.argv and "--ray-client-server-port=10001" in h.argv
    assert "--ray-client-server-port=10001" not in w.argv and h.argv[-1] == w.argv[-1] == "--block"


def test_cpu_unit_is_rendered_as_before(tmp_path: Path) -> None:
    files = render_role(tmp_path, rendered_vars(deployment_plan.build(inventory_with(tmp_path)), "h0"))
    assert set(files) == {"private-llm-engine", "engine.env"}
    unit = files["private-llm-engine"]
    assert (
        "ExecStart=/opt/private-llm/current/venv/bin/python /opt/private-llm/current/vllm_serve.py "
        "--model /var/lib/private-llm/models/m --served-model-name m --host 127.0.0.1 --port 8000 "
        "--max-model-len 4096 --max-num-seqs 64 --enforce-eager\n"
    ) in unit
    assert "CPUAffinity" not in unit and "Environment=" not in unit
    assert "VLLM_HOST_IP=127.0.0.1\n" in files["engine.env"]


def test_extra_args_reach_vllm_literally(tmp_path: Path) -> None:
    # systemd would expand %n and $HOME in ExecStart, quoted or not (#18: inventory strings in unit files)
    inv = inventory_with(tmp_path, extra_args=["--served-model-name=%n", "$HOME"])
    files = render_role(tmp_path, rendered_vars(deployment_plan.build(inv), "h0"))
    exec_line = next(line for line in files["private-llm-engine"].splitlines() if line.startswith("ExecStart="))
    assert exec_line.endswith("--enforce-eager --served-model-name=%%n '$$HOME'")


def test_an_org_model_name_is_served_whole_from_one_folder(tmp_path: Path) -> None:
    # vLLM's usual name form: the API keeps the '/', the weights' folder on the host cannot.
    inv = inventory_with(tmp_path, served_name="Qwen/Qwen2.5-7B-Instruct")
    variables = rendered_vars(deployment_plan.build(inv), "h0")
    files = render_role(tmp_path, variables)
    assert (
        "--model /var/lib/private-llm/models/Qwen--Qwen2.5-7B-Instruct "
        "--served-model-name Qwen/Qwen2.5-7B-Instruct --host"
    ) in files["private-llm-engine"]
    # A folder that is not one path component stops the role before any unit is written.
    with pytest.raises(AssertionError, match="engine_model_dir_name be one folder name"):
        render_role(tmp_path / "bad", {**variables, "engine_model_dir_name": "Qwen/Qwen2.5-7B-Instruct"})


def test_tuned_units_carry_devices_affinity_and_the_tuners_flags(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "deepseek-r1-distill-qwen-7b", type="h200", count=8, numa_nodes=2)
    files = render_role(tmp_path, rendered_vars(deployment_plan.build(inv), "h0"))
    assert {f"private-llm-engine-{i}" for i in range(1, 8)} | {"private-llm-engine"} <= set(files)
    unit = files["private-llm-engine-3"]
    assert "Environment=CUDA_VISIBLE_DEVICES=3\n" in unit and "CPUAffinity=48-63\n" in unit
    assert "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in unit
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--port 8003 --tensor-parallel-size 1 --gpu-memory-utilization 0.94" in exec_line
    assert exec_line.count("--max-model-len") == 1  # the tuner's sizing replaces the inventory's


def test_ray_head_unit_and_engine_env(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "deepseek-v3", hosts=2, type="h100", count=8)
    p = deployment_plan.build(inv)
    files = render_role(tmp_path, rendered_vars(p, "h0"))
    assert f"bin/ray start --head --node-ip-address=10.0.0.1 --port={engines.RAY_PORT}" in files["ray"]
    assert "VLLM_HOST_IP=10.0.0.1\n" in files["engine.env"]
    assert f"Environment=RAY_ADDRESS=10.0.0.1:{engines.RAY_PORT}" in files["private-llm-engine"]
    worker = render_role(tmp_path / "w", rendered_vars(p, "h1"))
    assert "private-llm-engine" not in worker  # a Ray worker runs no engine of its own
    assert "--address=10.0.0.1:" in worker["ray"]
    # Ray's workers inherit the Ray unit's environment: without its own address there, vLLM's
    # worker on a host with no default route took 0.0.0.0 ("Failed to get the IP address") in the lab
    assert "VLLM_HOST_IP=10.0.0.2\n" in worker["engine.env"] and "EnvironmentFile=" in worker["ray"]
    # Ray's token authentication on both hosts, for the Ray units and the engine (Ray's driver)
    for env in (files["engine.env"], worker["engine.env"]):
        assert "RAY_AUTH_MODE=token\nRAY_AUTH_TOKEN_PATH=/etc/private-llm/ray.token\n" in env
    # Ray's ports kept to the cluster's hosts by the plan's nftables rules, applied before Ray starts
    # (tests/unit/multihost/test_ray_firewall.py checks the rules themselves)
    for rendered, hp in ((files, p.hosts[0]), (worker, p.hosts[1])):
        assert hp.ray and rendered["ray.nft"] == hp.ray.firewall
        assert "ExecStart=/usr/sbin/nft -f /etc/private-llm/ray.nft\n" in rendered["ray-firewall"]
        assert "ExecStop=-/usr/sbin/nft delete table inet pli_ray\n" in rendered["ray-firewall"]  # `down`
        # a rules change is a reload (one transaction), propagated from Debian's nftables too
        assert "ExecReload=/usr/sbin/nft -f /etc/private-llm/ray.nft\n" in rendered["ray-firewall"]
        assert "ReloadPropagatedFrom=nftables.service\n" in rendered["ray-firewall"]
        # Ray checks the table at its start but does not restart with the firewall unit (review)
        assert "ExecStartPre=+/usr/sbin/nft list table inet pli_ray\n" in rendered["ray"]
        assert "Requires=private-llm-ray-firewall" not in rendered["ray"]
        assert "Wants=network-online.target private-llm-ray-firewall.service\n" in rendered["ray"]


def test_the_ray_token_is_made_only_for_a_model_spanning_hosts(tmp_path: Path) -> None:
    two = deployment_plan.build(inventory(tmp_path, "deepseek-v3", hosts=2, type="h100", count=8))
    secret_files.prepare(two)
    token = secret_files.ray_token_file(two.inventory.deployment)
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) == 64
    assert rendered_vars(two, "h1")["engine_ray_token_src"] == str(token)
    (tmp_path / "one").mkdir()
    one = deployment_plan.build(inventory(tmp_path / "one", "deepseek-r1-distill-qwen-7b", type="h200", count=8))
    # no Ray, no token, and no variable: a one-host deployment keeps its variables digest
    assert "engine_ray_token_src" not in rendered_vars(one, "h0")
    assert "RAY_AUTH_MODE" not in render_role(tmp_path / "r1", rendered_vars(one, "h0"))["engine.env"]


def test_engine_ports_may_not_run_into_another_service(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "deepseek-r1-distill-qwen-7b", type="h200", count=8)
    inv = inv.model_copy(update={"ports": inv.ports.model_copy(update={"gateway": 8005})})
    with pytest.raises(TuneError, match=r"includes ports\.gateway 8005"):
        deployment_plan.build(inv)


def test_fp8_weights_only_when_the_inventory_asks(tmp_path: Path) -> None:
    plain = inventory(tmp_path, "deepseek-v2-lite", type="h200", count=1)
    assert "--quantization" not in deployment_plan.build(plain).hosts[0].engines[0].argv
    data = plain.model_dump(mode="json", exclude_unset=True)
    data["engine"]["quantization"] = "fp8"
    fp8 = Inventory.model_validate(data)
    argv = deployment_plan.build(fp8).hosts[0].engines[0].argv
    assert argv[argv.index("--quantization") + 1] == "fp8"
    # A GPU without fp8 (Ampere) refuses it, with what to do, before any host is touched.
    data["gpu"]["type"] = "a100-80g"
    with pytest.raises(TuneError, match="fp8"):
        engines.tuned(Inventory.model_validate(data))

"""The plan of an inventory with `models:`: every model's engines on its hosts with its own argv,
ports after the primary's, the GPU memory split refused where it cannot hold, and a gray
release's canaries beside stable (plan.build's canary hook)."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import InventoryError
from installer.gpu import planner
from installer.gpu.tuner import TuneError
from installer.inventory import Inventory, ServedModel
from installer.inventory.served import Model, ModelEntry
from installer.planning import plan as deployment_plan
from service.config import Settings
from tests.support.engine_role import exec_argv, render_role, rendered_vars
from tests.support.gateway_role import gateway_config

STATE = "/var/lib/private-llm/models"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _weights(tmp: Path, name: str, config: dict[str, Any] | None = None) -> str:
    (tmp / name).mkdir(exist_ok=True)
    (tmp / name / "config.json").write_text(json.dumps(config or {}))
    return str(tmp / name)


def three_models(tmp: Path, **extra: Any) -> Inventory:
    """Two CPU hosts: chat on both, the embedder on h1, the reranker on h2."""
    return Inventory.model_validate({
        "deployment": "demo",
        "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"}],
        "engine": {"device": "cpu", "max_num_seqs": 8, "cpu_omp_threads_bind": "nobind"},
        "models": [
            {"name": "chat", "served_name": "tiny-chat", "path": _weights(tmp, "chat")},
            {"name": "emb", "served_name": "org/tiny-embed", "path": _weights(tmp, "emb"), "task": "embed",
             "hosts": ["h1"], "engine": {"max_num_seqs": 16, "cpu_kvcache_space_gib": 2}},
            {"name": "rank", "served_name": "tiny-rerank", "path": _weights(tmp, "rank"), "task": "score",
             "hosts": ["h2"], "engine": {"extra_args": ["--seed", "3"]}},
        ],
        **extra,
    })


def _arg(argv: tuple[str, ...] | list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_three_models_on_two_cpu_hosts_run_the_argv_plan_reports(tmp_path: Path) -> None:
    inv = three_models(tmp_path)
    p = deployment_plan.build(inv)
    reported = deployment_plan.engine_commands_before_preflight(inv)  # what `installer plan` prints
    assert reported == p.engine_commands()
    assert [(h, u) for h, u, _ in p.engine_commands()] == [
        ("h1", "private-llm-engine"), ("h1", "private-llm-engine-emb"),
        ("h2", "private-llm-engine"), ("h2", "private-llm-engine-rank"),
    ]
    for host in p.serving():
        files = render_role(tmp_path / host.name, rendered_vars(p, host.name))
        mine = [(unit, argv) for h, unit, argv in reported if h == host.name]
        assert sorted(n for n in files if n.startswith("private-llm-engine")) == sorted(u for u, _ in mine)
        for unit, argv in mine:
            assert exec_argv(files[unit]) == list(argv)
        # each engine its own KV cache and binding: engine.env (which would override them) has none
        assert "VLLM_CPU_KVCACHE_SPACE" not in files["engine.env"]
        assert "Environment=VLLM_CPU_OMP_THREADS_BIND=nobind\n" in files["private-llm-engine"]
    emb = p.host("h1").engines[1]
    assert files_of(tmp_path, p, "h1")["private-llm-engine-emb"].count("Environment=VLLM_CPU_KVCACHE_SPACE=2\n") == 1
    # each model with its weights, name, task, sizing and extra_args; ports after the primary's
    assert (emb.model_key, emb.task, emb.stage, emb.model_dir) == ("emb", "embed", "stable", "org--tiny-embed")
    assert _arg(emb.argv, "--model") == f"{STATE}/org--tiny-embed"
    assert _arg(emb.argv, "--served-model-name") == "org/tiny-embed"
    assert _arg(emb.argv, "--max-num-seqs") == "16" and emb.port == 8001
    assert emb.argv[emb.argv.index("--runner"):][:4] == ("--runner", "pooling", "--convert", "embed")
    rank = p.host("h2").engines[1]
    assert rank.argv[rank.argv.index("--runner"):][:4] == ("--runner", "pooling", "--convert", "classify")
    assert rank.port == 8002 and rank.argv[-2:] == ("--seed", "3") and _arg(rank.argv, "--max-num-seqs") == "8"
    chat = p.host("h2").engines[0]
    assert "--runner" not in chat.argv and _arg(chat.argv, "--served-model-name") == "tiny-chat"
    # every gateway routes to every engine, with its model, task and stage
    assert [(u.name, u.model, u.task, u.stage) for u in p.upstreams] == [
        ("h1", "tiny-chat", "generate", "stable"), ("h1-emb", "org/tiny-embed", "embed", "stable"),
        ("h2", "tiny-chat", "generate", "stable"), ("h2-rank", "tiny-rerank", "score", "stable"),
    ]
    assert p.upstreams[1].url == "https://10.0.0.1:8001"


def files_of(tmp: Path, p: deployment_plan.DeploymentPlan, host: str) -> dict[str, str]:
    return render_role(tmp / f"again-{host}", rendered_vars(p, host))


def test_one_entry_of_models_plans_what_model_does(tmp_path: Path) -> None:
    base = {"deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}],
            "engine": {"device": "cpu", "extra_args": ["--seed", "1"]}}
    path = _weights(tmp_path, "w")
    single = Inventory.model_validate({**base, "model": {"path": path, "served_name": "m"}})
    listed = Inventory.model_validate({**base, "models": [{"name": "chat", "served_name": "m", "path": path}]})
    assert deployment_plan.build(listed).engine_commands() == deployment_plan.build(single).engine_commands()


def test_an_inline_worker_reaches_each_engine_unit_its_model_asks_for(tmp_path: Path) -> None:
    data = three_models(tmp_path).model_dump(mode="json", exclude_unset=True)
    data["engine"]["cpu_inline_worker"] = True
    data["models"][2]["engine"]["cpu_inline_worker"] = False  # the reranker keeps its worker process
    p = deployment_plan.build(Inventory.model_validate(data))
    line = "Environment=VLLM_ENABLE_V1_MULTIPROCESSING=0\n"
    h1, h2 = files_of(tmp_path, p, "h1"), files_of(tmp_path, p, "h2")
    assert line in h1["private-llm-engine"] and line in h1["private-llm-engine-emb"]
    assert line in h2["private-llm-engine"] and line not in h2["private-llm-engine-rank"]
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in h1["engine.env"]  # each unit's own, not shared
    default = files_of(tmp_path / "default", deployment_plan.build(three_models(tmp_path)), "h1")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in default["private-llm-engine"]


def test_engine_ports_skip_other_services(tmp_path: Path) -> None:
    inv = three_models(tmp_path, ports={"engine": 9000, "gateway": 9001, "redis": 9002},
                       monitoring={"prometheus_port": 9004})
    p = deployment_plan.build(inv)
    assert [e.port for h in p.hosts for e in h.engines] == [9000, 9003, 9000, 9005]


def test_render_gives_the_gateways_task_and_stage_and_the_model_role_every_folder(tmp_path: Path) -> None:
    p = deployment_plan.build(three_models(tmp_path))
    variables = rendered_vars(p, "h1")
    embed = variables["gateway_engines"][1]
    assert {k: v for k, v in embed.items() if k != "max_model_len"} == {
        "name": "h1-emb", "url": "https://10.0.0.1:8001", "model": "org/tiny-embed", "task": "embed", "stage": "stable"
    }
    assert variables["models"] == [
        {"name": "chat", "served_name": "tiny-chat", "dir_name": "tiny-chat", "task": "generate",
         "stage": "stable", "hosts": ["h1", "h2"]},
        {"name": "emb", "served_name": "org/tiny-embed", "dir_name": "org--tiny-embed", "task": "embed",
         "stage": "stable", "hosts": ["h1"]},
        {"name": "rank", "served_name": "tiny-rerank", "dir_name": "tiny-rerank", "task": "score",
         "stage": "stable", "hosts": ["h2"]},
    ]
    assert variables["pli_stages_file"] == "/etc/private-llm/stages.json"
    instance = variables["engine_instances"][1]
    assert {k: instance[k] for k in ("model_key", "served_name", "task", "stage", "model_dir")} == {
        "model_key": "emb", "served_name": "org/tiny-embed", "task": "embed", "stage": "stable",
        "model_dir": "org--tiny-embed"}
    # the gateway keeps a max_tokens it sets within the engine's context
    argv = instance["argv"]
    assert embed["max_model_len"] == int(argv[argv.index("--max-model-len") + 1])
    # the health check waits until its gateway routes to each of them, by the gateway's names
    assert variables["healthcheck_engines"] == ["h1", "h1-emb"]
    assert set(variables["healthcheck_engines"]) <= {e["name"] for e in variables["gateway_engines"]}


def _canary(inv: Inventory, key: str, path: str, **engine: Any) -> ServedModel:
    stable = next(m for m in inv.served_models() if m.name == key)
    return ServedModel(key, Model(path=Path(path), served_name=stable.served_name), stable.task,
                       stable.engine.model_copy(update=engine), stable.hosts)


def test_a_canary_runs_beside_stable_with_its_own_unit_port_and_weights(tmp_path: Path) -> None:
    inv = three_models(tmp_path)
    before = deployment_plan.build(inv)
    canary = _canary(inv, "emb", _weights(tmp_path, "emb-v2"), max_num_seqs=4)
    p = deployment_plan.build(inv, {"emb": canary})
    h1 = p.host("h1")
    # stable's engines stay exactly as they were
    assert h1.engines[:2] == before.host("h1").engines and p.host("h2").engines == before.host("h2").engines
    c = h1.engines[2]
    assert (c.unit, c.stage, c.model_key, c.port) == ("private-llm-engine-emb-canary", "canary", "emb", 8003)
    assert h1.engine_names[2] == "h1-emb-canary"
    assert _arg(c.argv, "--model") == f"{STATE}/org--tiny-embed.canary" and _arg(c.argv, "--max-num-seqs") == "4"
    assert _arg(c.argv, "--served-model-name") == "org/tiny-embed" and "--convert" in c.argv
    assert ("h1-emb-canary", "org/tiny-embed", "embed", "canary") in [
        (u.name, u.model, u.task, u.stage) for u in p.upstreams]
    assert p.weights()[-1] == {"name": "emb", "served_name": "org/tiny-embed", "dir_name": "org--tiny-embed.canary",
                               "task": "embed", "stage": "canary", "hosts": ["h1"]}
    # the role writes the canary's unit too
    files = render_role(tmp_path / "canary", rendered_vars(p, "h1"))
    assert exec_argv(files["private-llm-engine-emb-canary"]) == list(c.argv)


def test_a_canary_of_the_primary_with_the_same_weights_reads_stable_s_folder(tmp_path: Path) -> None:
    inv = three_models(tmp_path)
    canary = _canary(inv, "chat", str(tmp_path / "chat"), max_num_seqs=2)
    p = deployment_plan.build(inv, {"chat": canary})
    for host in ("h1", "h2"):
        c = p.host(host).engines[-1]
        assert (c.unit, c.name, c.port) == ("private-llm-engine-canary", "engine-canary", 8003)
        assert _arg(c.argv, "--model") == f"{STATE}/tiny-chat"
        assert p.host(host).engine_names[-1] == f"{host}-canary"
    assert [w["dir_name"] for w in p.weights()] == ["tiny-chat", "org--tiny-embed", "tiny-rerank"]


def test_canaries_that_change_the_model_or_name_none_are_refused(tmp_path: Path) -> None:
    inv = three_models(tmp_path)
    with pytest.raises(TuneError, match="does not serve"):
        deployment_plan.build(inv, {"nope": _canary(inv, "emb", str(tmp_path / "emb"))})
    renamed = ServedModel("emb", Model(path=tmp_path / "emb", served_name="other"), "embed",
                          inv.served_models()[1].engine, ("h1",))
    with pytest.raises(TuneError, match="serves other"):
        deployment_plan.build(inv, {"emb": renamed})



def test_engine_names_given_twice_across_hosts_and_stages_are_refused_naming_both(tmp_path: Path) -> None:
    # host h2 renamed h1-emb: model emb's engine on h1 is named h1-emb too, and the gateways
    # refuse an upstream named twice
    inv = three_models(tmp_path)
    clash = inv.model_copy(update={"hosts": [inv.hosts[0], inv.hosts[1].model_copy(update={"name": "h1-emb"})],
                                   "models": [inv.models[0], inv.models[1]]})  # type: ignore[index]
    with pytest.raises(InventoryError) as err:
        deployment_plan.build(clash)
    (detail,) = err.value.details
    assert "engine name 'h1-emb' is given twice: model emb on host h1 (hosts[0].name; models[1].name) and " \
           "model chat on host h1-emb (hosts[1].name; models[0].name)" in detail
    assert detail.endswith("rename host h1 or host h1-emb or model emb")
    # a canary's engine name counts too: the primary's canary on h1 is h1-canary
    two = inv.model_copy(update={"hosts": [inv.hosts[0], inv.hosts[1].model_copy(update={"name": "h1-canary"})],
                                 "models": [inv.models[0]]})  # type: ignore[index]
    deployment_plan.build(two)
    with pytest.raises(InventoryError) as err:
        deployment_plan.build(two, {"chat": _canary(two, "chat", str(tmp_path / "chat"), max_num_seqs=2)})
    assert "'h1-canary' is given twice: model chat (canary) on host h1 (hosts[0].name; models[0].name) and " \
           "model chat on host h1-canary (hosts[1].name; models[0].name)" in err.value.details[0]


def test_a_canary_folder_that_is_another_model_s_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the inventory refuses such a served name (tests/unit/fixtures/inventory/served_name_canary.yml);
    # plan.build still never lets a canary's weights overwrite another model's: an entry's Model
    # made without the name check stands for a name the inventory let through
    monkeypatch.setattr(ModelEntry, "model", property(
        lambda self: Model.model_construct(path=self.path, served_name=self.served_name)))
    inv = three_models(tmp_path)
    assert inv.models is not None
    entries = [inv.models[0], inv.models[1].model_copy(update={"served_name": "tiny-chat.canary"}), inv.models[2]]
    odd = inv.model_copy(update={"models": entries})
    with pytest.raises(InventoryError, match=re.escape(
            "the canary of model chat would install its weights in tiny-chat.canary, model emb's folder")):
        deployment_plan.build(odd, {"chat": _canary(odd, "chat", _weights(tmp_path, "chat-v2"))})

def _gpu_inventory(tmp: Path, shares: tuple[float, float], second: dict[str, Any] | None = None) -> Inventory:
    return Inventory.model_validate({
        "deployment": "demo",
        "hosts": [{"name": "g1", "address": "10.0.0.1"}],
        "engine": {"device": "gpu"},
        "gpu": {"type": "h200", "count": 1},
        "models": [
            {"name": "chat", "served_name": "chat", "engine": {"gpu_memory_utilization": shares[0]},
             "path": _weights(tmp, "chat", planner.PRESETS["deepseek-r1-distill-qwen-7b"])},
            {"name": "emb", "served_name": "emb", "task": "embed", "engine": {"gpu_memory_utilization": shares[1]},
             "path": _weights(tmp, "emb", second or planner.PRESETS["deepseek-r1-distill-qwen-7b"])},
        ],
    })


def test_models_sharing_a_gpu_split_its_memory(tmp_path: Path) -> None:
    p = deployment_plan.build(_gpu_inventory(tmp_path, (0.6, 0.3)))
    chat, emb = p.host("g1").engines
    assert (chat.devices, emb.devices) == ("0", "0")
    shares = (_arg(chat.argv, "--gpu-memory-utilization"), _arg(emb.argv, "--gpu-memory-utilization"))
    assert tuple(map(float, shares)) == (0.6, 0.3)
    with pytest.raises(TuneError, match=r"GPU 0 of g1 is shared by chat 0\.7, emb 0\.3: 1 of its memory") as err:
        deployment_plan.build(_gpu_inventory(tmp_path, (0.7, 0.3)))
    assert "models[1].engine.gpu_memory_utilization" in err.value.details[0]


def test_a_model_whose_weights_do_not_fit_its_share_is_refused(tmp_path: Path) -> None:
    # 32B parameters in bf16 (about 61 GiB) in 0.25 of an H200
    big = planner.PRESETS["deepseek-r1-distill-qwen-32b"]
    with pytest.raises(TuneError, match=r"model emb on GPU 0 of g1: its weights and CUDA context need about \d+"):
        deployment_plan.build(_gpu_inventory(tmp_path, (0.6, 0.25), big))


def test_a_canary_leaves_stable_s_unit_files_as_they_are(tmp_path: Path) -> None:
    # the engine role restarts only engines whose files change: stable must not restart
    single = Inventory.model_validate({
        "deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}], "engine": {"device": "cpu"},
        "model": {"path": _weights(tmp_path, "one"), "served_name": "one"},
    })
    for inv, key in ((three_models(tmp_path), "emb"), (single, "main")):
        stable = next(m for m in inv.served_models() if m.name == key)
        before = render_role(tmp_path / f"before-{key}", rendered_vars(deployment_plan.build(inv), "h1"))
        canary = _canary(inv, key, _weights(tmp_path, f"{key}-v2"), max_num_seqs=2)
        during = render_role(tmp_path / f"during-{key}",
                             rendered_vars(deployment_plan.build(inv, {key: canary}), "h1"))
        assert {n: during[n] for n in before} == before
        unit = "private-llm-engine" if key == "main" else "private-llm-engine-emb"
        assert set(during) - set(before) == {f"{unit}-canary"}
        assert stable.engine.max_num_seqs != 2
    # one model's CPU engines share engine.env's KV cache size: a canary cannot have its own
    with pytest.raises(TuneError, match="cpu_kvcache_space_gib or cpu_omp_threads_bind"):
        deployment_plan.build(single, {"main": _canary(single, "main", str(tmp_path / "one"), cpu_kvcache_space_gib=4)})


def test_the_gateway_reads_each_engine_s_task_and_stage_from_its_rendered_config(tmp_path: Path) -> None:
    inv = three_models(tmp_path)
    p = deployment_plan.build(inv, {"emb": _canary(inv, "emb", _weights(tmp_path, "emb-v2"))})
    variables = rendered_vars(p, "h1")
    settings = Settings.model_validate(gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""}))
    assert settings.stages_file == Path("/etc/private-llm/stages.json")
    assert [(e.name, e.model, e.task, e.stage) for e in settings.engines] == [
        (u.name, u.model, u.task, u.stage) for u in p.upstreams]
    assert ("h1-emb-canary", "org/tiny-embed", "embed", "canary") in [
        (e.name, e.model, e.task, e.stage) for e in settings.engines]

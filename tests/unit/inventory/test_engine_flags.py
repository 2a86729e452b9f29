"""engine.extra_args may not set a flag the installer writes into an engine's argv (#40): not in
any spelling vLLM's argparse reads as that flag, at the top level or in a model's own engine; the
loader says where (file:line) and which setting changes it instead. The set of flags is the
writer's own: vllm_argv stops at a flag engine_flags does not classify."""

import json
from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import InventoryError
from installer.gpu import planner
from installer.inventory import engine_flags, load_inventory
from installer.inventory.models import Inventory
from installer.planning import engines
from installer.planning import plan as deployment_plan


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


@pytest.mark.parametrize(("item", "flag"), [
    ("--host", "--host"),
    ("--host=0.0.0.0", "--host"),
    ("--ssl-cert-reqs", "--ssl-cert-reqs"),
    ("--ssl_cert_reqs", "--ssl-cert-reqs"),  # FlexibleArgumentParser reads '_' as '-'
    ("--ssl_cert_reqs=0", "--ssl-cert-reqs"),
    ("--ssl-cert-r=0", "--ssl-cert-reqs"),  # argparse's allow_abbrev: an unambiguous start
    ("--ssl-ca", "--ssl-ca-certs"),
    ("--served_model_name=other", "--served-model-name"),
    ("--port=9000", "--port"),
    ("--gpu-memory-utilization", "--gpu-memory-utilization"),
    ("--max_model_len=65536", "--max-model-len"),
    ("--tensor-parallel-size=2", "--tensor-parallel-size"),
    ("-tp", "--tensor-parallel-size"),
    ("-tp=2", "--tensor-parallel-size"),
    ("-t", "--tensor-parallel-size"),  # a single-dash alias abbreviated
    ("-pp", "--pipeline-parallel-size"),
    ("-q", "--quantization"),
    ("-qfp8", "--quantization"),  # a one-letter alias with its value attached
    ("--runner=pooling", "--runner"),
    ("--host.x", "--host"),  # --flag.key: a JSON field of the flag
    ("--enable-ssl-refresh", "--enable-ssl-refresh"),
    ("--no-enable-ssl-refresh", "--no-enable-ssl-refresh"),
    ("--no-enforce-eager", "--no-enforce-eager"),
    ("--api-key=secret", "--api-key"),
    ("--uds=/run/x.sock", "--uds"),
    ("--config", "--config"),
    ("--data-parallel-size=2", "--data-parallel-size"),
    ("-dp", "--data-parallel-size"),
])
def test_every_spelling_vllm_reads_as_an_owned_flag_is_refused(item: str, flag: str) -> None:
    assert engine_flags.owned_flag(item) == flag
    problem = engine_flags.problem(item)
    assert problem is not None and flag in problem and "remove it from extra_args" in problem


@pytest.mark.parametrize("item", [
    "--seed", "7", "-1", "--", "0.0.0.0", "--trust-remote-code", "--chat-template=/x.jinja",
    "--model-impl", "--config-format=hf", "--quantization-param-path",
    # written by the installer, left to extra_args on purpose (engine_flags.LEFT_TO_EXTRA_ARGS)
    "--enforce-eager", "--enable-prefix-caching", "--max-num-batched-tokens=16384", "--kv-cache-dtype",
    "--max-cudagraph-capture-size",
])
def test_other_flags_and_values_pass(item: str) -> None:
    assert engine_flags.owned_flag(item) is None and engine_flags.problem(item) is None


def test_the_message_names_the_setting_that_changes_it_instead() -> None:
    assert engine_flags.problem("--ssl_cert_reqs=0") == (
        "vLLM reads '--ssl_cert_reqs=0' as --ssl-cert-reqs, which is set by the installer; remove it from "
        "extra_args and set tls (mode, certificates): an engine on the network admits only the gateways' "
        "client certificates"
    )
    assert engine_flags.problem("--port") == (
        "--port is set by the installer; remove it from extra_args and set ports.engine: the gateways and "
        "health checks reach the engines there"
    )


def _write(tmp_path: Path, engine: str, models: str = "") -> Path:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "config.json").write_text("{}")
    model = f"models:\n{models}" if models else "model: {path: w, served_name: tiny}\n"
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: demo\n"
        "hosts:\n  - {name: h1, address: 10.0.0.1}\n  - {name: h2, address: 10.0.0.2}\n"
        f"{engine}{model}"
    )
    return path


def test_the_loader_refuses_each_at_its_line_top_level_and_per_model(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "engine:\n  extra_args:\n    - --seed=1\n    - --host\n    - 0.0.0.0\n    - --SSL-CERT-REQS\n",
        "  - {name: chat, served_name: tiny, path: w}\n"
        "  - name: emb\n    served_name: emb\n    path: w\n    task: embed\n"
        "    engine:\n      extra_args: [--enforce-eager, -tp=2]\n",
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert err.value.details == [
        f"{path}:8: engine.extra_args[1]: --host is set by the installer; remove it from extra_args and set "
        "the host's address (hosts[].address): an engine listens on it when gateways on other hosts reach "
        "it, otherwise on 127.0.0.1",
        f"{path}:18: models[1].engine.extra_args[1]: vLLM reads '-tp=2' as --tensor-parallel-size, which is "
        "set by the installer; remove it from extra_args and set engine.tensor_parallel_size (with gpu.type "
        "and gpu.count, the tuner chooses it)",
    ]  # argparse is case-sensitive: --SSL-CERT-REQS is no flag of vLLM's (it refuses it itself)


def test_extra_args_of_other_flags_still_reach_vllm_last(tmp_path: Path) -> None:
    inv = load_inventory(_write(tmp_path, "engine: {device: cpu, extra_args: [--seed, '7', --enforce-eager]}\n"))
    (engine,) = deployment_plan.build(inv).hosts[0].engines
    assert engine.argv[-3:] == ("--seed", "7", "--enforce-eager")


def _inventory(tmp: Path, preset: str, hosts: int, engine: dict[str, Any], **more: Any) -> Inventory:
    model = tmp / f"model-{preset or 'none'}"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(planner.PRESETS[preset] if preset else {}))
    doc: dict[str, Any] = {
        "deployment": "demo", "engine": engine,
        "hosts": [{"name": f"h{i}", "address": f"10.0.0.{i + 1}"} for i in range(hosts)],
    }
    if "models" in more:
        doc["models"] = [{**m, "path": str(model)} for m in more.pop("models")]
    else:
        doc["model"] = {"path": str(model), "served_name": "m"}
    return Inventory.model_validate({**doc, **more})


def test_every_flag_the_writer_writes_is_classified_and_every_listed_one_is_written(tmp_path: Path) -> None:
    layouts = [
        _inventory(tmp_path, "", 1, {"device": "cpu"},  # one CPU host: eager, no TLS; a trace collector
                   monitoring={"otlp_endpoint": "http://otel.example:4318"}),
        _inventory(tmp_path, "", 2, {"device": "cpu"}, models=[  # TLS on the network; a pooling task
            {"name": "chat", "served_name": "c"}, {"name": "emb", "served_name": "e", "task": "embed"}]),
        _inventory(tmp_path, "deepseek-r1-distill-qwen-7b", 1, {"quantization": "fp8"}),  # untuned GPU sizing
        _inventory(tmp_path, "deepseek-r1-distill-qwen-32b", 1, {"quantization": "fp8", "max_model_len": 8192},
                   gpu={"type": "h200", "count": 8}),  # the tuner on Hopper with fp8 weights
        _inventory(tmp_path, "deepseek-v3", 2, {"max_model_len": 8192},
                   gpu={"type": "h100", "count": 8}),  # across hosts: pipeline parallel over Ray
        _inventory(tmp_path, "deepseek-v3", 1, {"max_model_len": 8192}, models=[  # a serving profile's
            {"name": "r1", "served_name": "r1", "profile": "deepseek-r1"}]),  # parsers and MTP
    ]
    written = {
        a for inv in layouts for h in deployment_plan.build(inv).hosts for e in h.engines for a in e.argv
        if a.startswith("--")
    }
    assert written - engine_flags.OWNED.keys() - engine_flags.LEFT_TO_EXTRA_ARGS == set()
    assert set(engine_flags.WRITTEN) <= written  # no stale entry: each is one the writer writes


def test_a_flag_added_to_the_writer_unclassified_stops_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(engines.TASK_ARGS, "generate", ("--new-flag", "1"))
    with pytest.raises(RuntimeError, match=r"vllm_argv writes --new-flag, which .*engine_flags.py does not list"):
        deployment_plan.build(_inventory(tmp_path, "", 1, {"device": "cpu"}))

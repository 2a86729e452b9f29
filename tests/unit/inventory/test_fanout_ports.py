"""The weights fan-out's fixed port (8471, weights/serve.py's PORT) against the deployment's other
listeners on the fan-out's hosts (#39): refused at the setting's file:line when another service
would take it there; left alone when that service runs elsewhere or nothing fans out; the
engines the plan places after ports.engine step around it."""

import json
from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.gpu import planner
from installer.gpu.tuner import TuneError
from installer.inventory import fanout_ports, load_inventory
from installer.inventory.models import Inventory
from installer.planning import engines
from installer.weights import fanout, serve
from tests.support.weights_fanout import fanout_inventory

FAN = "model:\n  path: ./weights\n  served_name: tiny\n  distribute: fanout\n"  # on h1-h3, lines 6-9


def _refused(path: Path) -> str:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return "\n".join([str(err.value), *err.value.details])


def test_one_port_everywhere() -> None:
    assert fanout_ports.PORT == fanout.FANOUT_PORT == serve.PORT == 8471
    # the fixed ports beside it never were it
    assert fanout_ports.PORT not in (engines.RAY_PORT, engines.ALERTMANAGER_PORT, engines.NODE_EXPORTER_PORT)


@pytest.mark.parametrize(("section", "line", "key"), [
    ("ports: {engine: 8471}\n", 11, "ports.engine"),
    ("ports: {gateway: 8471}\n", 11, "ports.gateway"),
    ("ports: {redis: 8471}\n", 11, "ports.redis"),
    ("monitoring: {prometheus_port: 8471}\n", 11, "monitoring.prometheus_port"),
    ("ssh: {port: 8471}\n", 11, "ssh.port"),
])
def test_a_listener_on_the_fanout_port_is_refused_at_its_line(tmp_path: Path, section: str, line: int,
                                                               key: str) -> None:
    text = _refused(fanout_inventory(tmp_path, FAN, section))
    assert f"{tmp_path / 'inv.yml'}:{line}: {key}: {key} 8471 is the weights fan-out's port on " in text, text
    assert f"pick another port for {key}, or set distribute: push" in text, text


def test_the_sentinel_and_a_hosts_own_ssh_port(tmp_path: Path) -> None:
    text = _refused(fanout_inventory(tmp_path, FAN, "redis: {replicas: 1}\nports: {redis_sentinel: 8471}\n"))
    assert f"{tmp_path / 'inv.yml'}:12: ports.redis_sentinel: ports.redis_sentinel 8471" in text, text
    assert "port on h1, h2, h3 " in text, text  # Sentinel on the three hosts
    path = fanout_inventory(tmp_path, FAN)
    path.write_text(path.read_text().replace("{name: h2, address: 10.0.0.2}",
                                             "{name: h2, address: 10.0.0.2, ssh: {port: 8471}}"))
    text = _refused(path)
    assert f"{tmp_path / 'inv.yml'}:4: hosts[1].ssh.port: hosts[1].ssh.port 8471 is the weights fan-out's port on h2 " \
        in text, text


def test_elsewhere_or_without_a_fanout_it_is_free(tmp_path: Path) -> None:
    # pushed weights: no fan-out server runs, 8471 is the gateway's to take
    load_inventory(fanout_inventory(tmp_path, FAN.replace("  distribute: fanout\n", ""), "ports: {gateway: 8471}\n"))
    # the fan-out's hosts are h2 and h3; Prometheus runs on h1 (the first host, no monitoring group)
    models = ("models:\n  - {name: chat, served_name: tiny, path: ./weights}\n"
              "  - {name: emb, served_name: emb, path: ./weights, task: embed, hosts: [h2, h3], distribute: fanout}\n")
    inv = load_inventory(fanout_inventory(tmp_path, models, "monitoring: {prometheus_port: 8471}\n"))
    assert [h.name for h in fanout_ports.fanout_hosts(inv)] == ["h2", "h3"]
    text = _refused(fanout_inventory(tmp_path, models, "ports: {gateway: 8471}\n"))  # the gateways run on h2, h3 too
    assert "ports.gateway 8471 is the weights fan-out's port on h2, h3 " in text, text
    # one host: nothing fans out
    one = models.replace("hosts: [h2, h3]", "hosts: [h2]")
    load_inventory(fanout_inventory(tmp_path, one, "ports: {gateway: 8471}\n"))


def test_a_second_models_engine_steps_around_it(tmp_path: Path) -> None:
    models = ("models:\n"
              "  - {name: chat, served_name: tiny, path: ./weights, distribute: fanout}\n"
              "  - {name: emb, served_name: emb, path: ./weights, task: embed, distribute: fanout}\n")
    inv = load_inventory(fanout_inventory(tmp_path, models, "ports: {engine: 8470}\n"))
    ports = [m.port for m in engines.layout(inv, None)]
    assert ports == [8470, 8472]  # 8471 skipped: the fan-out's
    pushed = load_inventory(fanout_inventory(tmp_path, models.replace(", distribute: fanout}", "}"),
                                             "ports: {engine: 8470}\n"))
    assert [m.port for m in engines.layout(pushed, None)] == [8470, 8471]  # unchanged without one


def test_a_gpu_hosts_engine_range_over_it_is_refused(tmp_path: Path) -> None:
    # a 7B model on 8 x H200: eight engines per host on 8468-8475, which holds the fan-out's port
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(planner.PRESETS["deepseek-r1-distill-qwen-7b"]))
    data = {"deployment": "demo", "model": {"path": str(model), "served_name": "m", "distribute": "fanout"},
            "hosts": [{"name": "h0", "address": "10.0.0.1"}, {"name": "h1", "address": "10.0.0.2"}],
            "engine": {"device": "gpu", "max_model_len": 8192}, "gpu": {"type": "h200", "count": 8},
            "ports": {"engine": 8468}}
    with pytest.raises(TuneError, match=r"8468-8475, which includes the weights fan-out's port 8471"):
        engines.tuned(Inventory.model_validate(data))
    data["model"].pop("distribute")  # pushed: the range is free to hold it
    assert engines.tuned(Inventory.model_validate(data)) is not None

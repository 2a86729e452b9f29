"""The per-model switch of mid-stream failover (inventory `resume_streams`, service/stream_resume.py):
refused at its line when it is no boolean, carried by the plan to every engine of its model, and
rendered into gateway.yml only when off, so deployments that leave it unset keep their files and
their config digest."""

from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import InventoryError
from installer.inventory import Inventory, load_inventory
from installer.planning import plan as deployment_plan
from service.config import Settings
from service.routing import Router
from tests.support.engine_role import rendered_vars
from tests.support.gateway_role import gateway_config, one_host


def _weights(tmp: Path, name: str) -> str:
    (tmp / name).mkdir(exist_ok=True)
    (tmp / name / "config.json").write_text("{}")
    return str(tmp / name)


def _two_models(tmp: Path, **chat: Any) -> Inventory:
    return Inventory.model_validate({
        "deployment": "demo",
        "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"}],
        "engine": {"device": "cpu", "cpu_omp_threads_bind": "nobind"},
        "models": [
            {"name": "chat", "served_name": "tiny-chat", "path": _weights(tmp, "chat"), **chat},
            {"name": "emb", "served_name": "tiny-embed", "path": _weights(tmp, "emb"), "task": "embed"},
        ],
    })


def _settings(plan: deployment_plan.DeploymentPlan, host: str) -> Settings:
    variables = rendered_vars(plan, host)
    return Settings.model_validate(gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""}))


def test_a_model_s_switch_reaches_every_gateway_s_engines_of_that_model(tmp_path: Path) -> None:
    p = deployment_plan.build(_two_models(tmp_path, resume_streams=False))
    assert {(u.model, u.resume_streams) for u in p.upstreams} == {("tiny-chat", False), ("tiny-embed", True)}
    for host in ("h1", "h2"):
        settings = _settings(p, host)
        assert {(e.model, e.resume_streams) for e in settings.engines} == {
            ("tiny-chat", False), ("tiny-embed", True)}
        assert Router(settings.engines, 1.0).no_resume == {"tiny-chat"}


def test_left_unset_nothing_changes_in_gateway_yml_or_the_inventory_dump(tmp_path: Path) -> None:
    inv = one_host(tmp_path)
    p = deployment_plan.build(inv)
    assert all(u.resume_streams for u in p.upstreams)
    variables = rendered_vars(p, "h1")
    assert all("resume_streams" not in e for e in variables["gateway_engines"])  # group_vars as before
    assert "resume_streams" not in gateway_config({**variables, "gateway_workers": 1})["engines"][0]
    assert "resume_streams" not in inv.model_dump()["model"]  # the revision's config digest stays
    off = one_host(tmp_path, **{"model": {"path": str(tmp_path / "w"), "served_name": "tiny", "resume_streams": False}})
    assert off.model_dump()["model"]["resume_streams"] is False
    assert _settings(deployment_plan.build(off), "h1").engines[0].resume_streams is False


def test_a_switch_that_is_no_boolean_is_refused_at_its_line(tmp_path: Path) -> None:
    _weights(tmp_path, "w")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: demo\n"
        "hosts: [{name: h1, address: 10.0.0.1}]\n"
        "engine: {device: cpu}\n"
        "model:\n"
        "  path: w\n"
        "  served_name: tiny\n"
        "  resume_streams: sometimes\n"
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert any(d.startswith(f"{path}:7: model.resume_streams:") for d in err.value.details), err.value.details


@pytest.mark.parametrize(("serving", "family"), [
    ({"profile": "deepseek-r1"}, "deepseek-r1"),
    ({"profile": "deepseek-v3-switch"}, "deepseek-v3-switch"),
    ({"profile": "deepseek-v3"}, None),  # no reasoning parser: no reasoning to resume
    ({"profile": "deepseek-r1", "reasoning_parser": "deepseek_v3"}, None),  # the parser overridden
    ({}, None),  # auto, and the checkpoint is no family a profile covers
])
def test_the_serving_profile_reaches_gateway_yml_as_the_family_that_resumes_reasoning(
    tmp_path: Path, serving: dict[str, Any], family: str | None
) -> None:
    p = deployment_plan.build(_two_models(tmp_path, **serving))
    assert {(u.model, u.resume_family) for u in p.upstreams} == {("tiny-chat", family), ("tiny-embed", None)}
    settings = _settings(p, "h1")
    assert {(e.model, e.resume_family) for e in settings.engines} == {("tiny-chat", family), ("tiny-embed", None)}
    assert Router(settings.engines, 1.0).resume_family == ({"tiny-chat": family} if family else {})
    if family is None:  # nothing new in group_vars
        assert all("resume_family" not in e for e in rendered_vars(p, "h1")["gateway_engines"])

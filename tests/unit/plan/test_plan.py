"""The deployment plan (installer/planning/plan.py): frozen, free of side effects, and the one source of
every engine's argv: what `installer plan` reports is what the engine role's unit runs."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from installer.ansible import render
from installer.base.errors import InstallerError
from installer.bundle.manifest import Manifest
from installer.flows import gpu_fit
from installer.gpu import planner
from installer.inventory.models import Inventory
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from tests.support.engine_role import exec_argv, render_role, rendered_vars


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def inventory(tmp: Path, hosts: int, engine: dict[str, Any], gpu: dict[str, Any] | None = None,
              preset: str = "") -> Inventory:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(planner.PRESETS[preset] if preset else {}))
    return Inventory.model_validate({
        "deployment": "demo",
        "model": {"path": str(model), "served_name": "m"},
        "hosts": [{"name": f"h{i}", "address": f"10.0.0.{i + 1}"} for i in range(hosts)],
        "engine": engine,
        **({"gpu": gpu} if gpu else {}),
    })


def _units_match_the_plan(tmp: Path, inv: Inventory) -> deployment_plan.DeploymentPlan:
    """Every engine unit the role renders runs exactly the argv `installer plan` reports."""
    p = deployment_plan.build(inv)
    reported = deployment_plan.engine_commands_before_preflight(inv)  # what `installer plan` prints
    assert reported == p.engine_commands()
    assert reported
    for host in p.serving():
        files = render_role(tmp / host.name, rendered_vars(p, host.name))
        mine = [(unit, argv) for h, unit, argv in reported if h == host.name]
        assert sorted(n for n in files if n.startswith("private-llm-engine")) == sorted(u for u, _ in mine)
        for unit, argv in mine:
            assert exec_argv(files[unit]) == list(argv)
    return p


def test_a_cpu_inventory_deploys_the_argv_plan_reports(tmp_path: Path) -> None:
    # two hosts: engines on the network with mutual TLS, the inventory's sizing and extra_args
    inv = inventory(tmp_path, 2, {"device": "cpu", "max_num_seqs": 8, "extra_args": ["--seed", "7"]})
    p = _units_match_the_plan(tmp_path, inv)
    argv = p.host("h1").engines[0].argv
    assert argv[argv.index("--host") + 1] == "10.0.0.2" and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--ssl-cert-reqs" in argv and argv[-2:] == ("--seed", "7")


def test_a_gpu_inventory_deploys_the_argv_plan_reports(tmp_path: Path) -> None:
    # several engines per host, with the inventory's own max_num_seqs and gpu_memory_utilization
    inv = inventory(tmp_path, 2, {"device": "gpu", "max_num_seqs": 32, "gpu_memory_utilization": 0.85},
                    {"type": "h200", "count": 4}, "deepseek-r1-distill-qwen-7b")
    p = _units_match_the_plan(tmp_path, inv)
    assert [len(h.engines) for h in p.hosts] == [4, 4]
    for _host, _unit, argv in p.engine_commands():
        assert argv[argv.index("--max-num-seqs") + 1] == "32"
        assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85"
    # the GPU fit section of `installer plan` tunes with the same call: the same flags
    fit = gpu_fit.fit(inv)
    assert fit is not None and fit.tuned is not None
    assert [tuple(e.args) for e in fit.tuned.engines] == [e.tuned_args for h in p.hosts for e in h.engines]


def test_plan_promises_no_argv_for_gpus_only_preflight_will_see(tmp_path: Path) -> None:
    inv = inventory(tmp_path, 1, {"device": "gpu"}, {"cuda": "13.0"}, "deepseek-r1-distill-qwen-7b")
    assert deployment_plan.engine_commands_before_preflight(inv) is None


def test_the_plan_is_frozen(tmp_path: Path) -> None:
    p = deployment_plan.build(inventory(tmp_path, 2, {"device": "cpu"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.cross_host = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.hosts[0].engines[0].port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.layout["pli_root"] = "/elsewhere"  # type: ignore[index]
    assert isinstance(p.hosts, tuple) and isinstance(p.hosts[0].engines[0].argv, tuple)


def test_building_and_rendering_write_no_file(tmp_path: Path, state: Path) -> None:
    """Several gateways share a Redis whose password the flow makes before rendering; building
    the plan and rendering its variables write nothing (no password file as a side effect)."""
    inv = inventory(tmp_path, 2, {"device": "cpu"})
    p = deployment_plan.build(inv)
    assert p.redis is not None and p.redis.host == "h0"
    man = Manifest(target={}, components={}, packages=[])
    gv = render.group_vars(p, man)
    render.hosts_yaml(p, man)
    assert not state.exists() or not [f for f in state.rglob("*") if f.is_file()]
    # Rendering to disk without it stops with what to do, rather than making a secret itself.
    with pytest.raises(InstallerError, match="secrets are not made yet") as err:
        render.write(p, man, tmp_path / "run")
    assert gv["redis_password_file"] in str(err.value)
    secret_files.prepare(p)
    assert secret_files.redis_password_file(inv.deployment) == Path(gv["redis_password_file"])
    assert (render.write(p, man, tmp_path / "run") / "hosts.yml").is_file()


def test_a_plan_pinned_to_its_record_runs_what_the_revision_ran(tmp_path: Path) -> None:
    # a rollback rebuilds the old revision's plan with today's installer: the record's argv and
    # environment win for the engines it has, so no flag the revision never ran with comes back
    from installer.planning import plan_record

    inv = inventory(tmp_path, 2, {"device": "cpu", "max_num_seqs": 8})
    built = deployment_plan.build(inv)
    rec = json.loads(plan_record.dump(plan_record.record(built)))
    h0 = rec["hosts"][0]["engines"][0]
    h0["argv"] = [a for a in h0["argv"] if a != "--max-num-seqs" and a != "8"]
    h0["argv"][h0["argv"].index("--max-model-len") + 1] = "1234"  # the context it ran with reaches its gateways
    h0["env"] = {"OLD": "1"}
    rec["hosts"][1]["engines"][0]["port"] += 1  # moved since: keeps the rebuilt values
    pinned = plan_record.pinned(built, rec)
    assert pinned.host("h0").engines[0].argv == tuple(h0["argv"]) != built.host("h0").engines[0].argv
    assert pinned.host("h0").engines[0].env == (("OLD", "1"),)
    assert pinned.host("h1").engines[0] == built.host("h1").engines[0]
    name = pinned.host("h0").engine_names[0]
    assert [u.max_model_len for u in pinned.upstreams if u.name == name] == [1234]
    assert plan_record.pinned(built, plan_record.record(built)) == built


def test_a_rollback_configures_the_argv_its_revision_recorded(tmp_path: Path) -> None:
    from installer.day2 import rolling
    from installer.planning import plan_record

    inv = inventory(tmp_path, 1, {"device": "cpu"})
    rec = plan_record.record(deployment_plan.build(inv))
    rec["hosts"][0]["engines"][0]["argv"] = ["--model", "/old"]

    class Rev:  # a revision as revisions.get returns it: its inventory and its kept plan
        def inventory(self) -> Inventory:
            return inv

        def plan_record(self) -> dict[str, Any] | None:
            return rec

    assert rolling.Planned.of(Rev()).plan.host("h0").engines[0].argv == ("--model", "/old")  # type: ignore[arg-type]


def test_a_pinned_plan_keeps_the_ray_argv_its_revision_ran(tmp_path: Path) -> None:
    from installer.planning import plan_record
    from installer.planning.engines import RayNode

    built = deployment_plan.build(inventory(tmp_path, 1, {"device": "cpu"}))
    host = dataclasses.replace(built.hosts[0], ray=RayNode("head", "private-llm-ray", ("start", "--new"), "10.0.0.1"))
    p = dataclasses.replace(built, hosts=(host,))
    rec = plan_record.record(p)
    rec["hosts"][0]["ray"]["argv"] = ["start", "--old"]
    assert plan_record.pinned(p, rec).hosts[0].ray.argv == ("start", "--old")  # type: ignore[union-attr]
    rec["hosts"][0]["ray"]["role"] = "worker"  # another role since: today's argv
    assert plan_record.pinned(p, rec).hosts[0].ray.argv == ("start", "--new")  # type: ignore[union-attr]

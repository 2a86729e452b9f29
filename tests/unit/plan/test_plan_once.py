"""Each command builds its deployment plan once and passes it down (#34), and every revision keeps
the plan it was deployed with: `installer plan --revision R` shows it, `installer plan --diff`
compares the inventory's plan with the running revision's.

`up` and `plan` run here through their whole flow with the hosts stood in for at the edges
(preflight's facts, the push, Ansible's result, the proof through each gateway); the builds are
counted on installer.planning.plan.build, the one builder."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.ansible.runner import HostResult, PlaybookResult
from installer.cli import _register, app
from installer.converged import fast_path as converged
from installer.day2 import rolling
from installer.flows import deploy
from installer.hosts.prove import Proof
from installer.inventory import load_inventory
from installer.planning import plan, plan_record
from installer.preflight.hosts import HostReport, Needs
from installer.preparation import prepare
from installer.state import revisions
from tests.support.revisions import anchored_site, signed_bundle

runner = CliRunner()
_register()
CPUS = {"a": "4", "b": "16"}  # what preflight counts on each host: gateway workers 1 and 2


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every plan.build call's inventory, in order."""
    seen: list[Any] = []
    real = plan.build

    def counted(inv: Any, *args: Any, **kwargs: Any) -> plan.DeploymentPlan:
        seen.append(inv)
        return real(inv, *args, **kwargs)

    monkeypatch.setattr(plan, "build", counted)
    return seen


@pytest.fixture
def hosts(site: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The two hosts as `up` sees them: fresh at preflight, every play and proof passing."""
    def run_preflight(inv: Any, _needs: Needs) -> list[HostReport]:
        return [HostReport(h.name, h.address, {"release_json": "", "cpus": CPUS[h.name]}) for h in inv.hosts]

    def run_playbook(*_a: Any, **_k: Any) -> PlaybookResult:
        return PlaybookResult("successful", 0, {n: HostResult(n, ok=3, changed=1) for n in ("a", "b")}, site.parent)

    monkeypatch.setattr(prepare, "run_preflight", run_preflight)
    monkeypatch.setattr(prepare.bundle_push, "push", lambda *_a, **_k: [])
    monkeypatch.setattr(deploy, "run_playbook", run_playbook)
    monkeypatch.setattr(deploy.converged, "verify", lambda *_a, **_k: converged.Verdict(False, ["first run"]))
    monkeypatch.setattr(deploy.converged, "record", lambda *_a, **_k: [])
    monkeypatch.setattr(deploy, "prove", lambda inv, _s, _engines: [
        Proof(h.name, f"http://{h.address}:8080/v1", True, "answered") for h in inv.hosts])
    return {"bundle": signed_bundle(site)}


def test_validate_builds_the_plan_once(site: Path, builds: list[Any]) -> None:
    result = runner.invoke(app, ["validate", "-i", str(site)])
    assert result.exit_code == 0, result.output
    assert len(builds) == 1


def test_plan_builds_once_and_prints_what_it_built(site: Path, builds: list[Any], hosts: dict[str, Any]) -> None:
    result = runner.invoke(app, ["plan", "-i", str(site), "--bundle", str(hosts["bundle"])])
    assert result.exit_code == 0, result.output
    assert len(builds) == 1
    assert "hardware: cpu" in result.output
    argv = plan.build(load_inventory(site)).engine_commands()
    assert all(f"{h} {unit}: " in result.output for h, unit, _ in argv)


def test_up_builds_once_and_its_revision_keeps_that_plan(site: Path, builds: list[Any], hosts: dict[str, Any]) -> None:
    result = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts["bundle"])])
    assert result.exit_code == 0, result.output
    assert len(builds) == 1
    (rev,) = revisions.revisions("demo")
    stored = rev.plan_record()
    # the record round-trips: what the revision keeps is what the command built (with the CPUs
    # preflight counted), read back whole
    counted = plan.with_cpu_counts(plan.build(builds[0]), {"a": 4, "b": 16})
    assert stored == json.loads(plan_record.dump(plan_record.record(counted)))
    assert [h["name"] for h in stored["hosts"]] == ["a", "b"]
    assert [(h["cpu_count"], h["gateway_workers"]) for h in stored["hosts"]] == [(4, 1), (16, 2)]
    assert "--served-model-name" in stored["hosts"][0]["engines"][0]["argv"]

    shown = runner.invoke(app, ["plan", "-i", str(site), "--revision", str(rev.number)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == list(plan_record.lines(stored))

    same = runner.invoke(app, ["plan", "-i", str(site), "--diff"])
    assert same.exit_code == 0, same.output
    assert f"no change: the inventory's plan is revision {rev.number}'s (running)" in same.output

    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 7}"))
    changed = runner.invoke(app, ["plan", "-i", str(site), "--diff"])
    assert changed.exit_code == 0, changed.output
    removed = [ln for ln in changed.output.splitlines() if ln.startswith("-    vllm ")]
    added = [ln for ln in changed.output.splitlines() if ln.startswith("+    vllm ")]
    assert len(removed) == len(added) == 2  # one engine on each host
    assert all("--max-num-seqs 7" in ln for ln in added) and not any("--max-num-seqs 7" in ln for ln in removed)


def test_a_revision_without_a_kept_plan_says_so(site: Path) -> None:
    from tests.support.revisions import known_revision

    rev = known_revision(site)  # made without a plan, as revisions before plans were kept
    result = runner.invoke(app, ["plan", "-i", str(site), "--revision", str(rev.number)])
    assert isinstance(result.exception, revisions.StateError)
    assert "made before plans were kept" in str(result.exception)


def _rolled(site: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any]]:
    """A roll's hosts stood in for (Ansible's result, drains, the batch proof): the plans each
    batch is configured with and gated with, in order."""
    configured: list[plan.DeploymentPlan] = []
    gated: list[plan.DeploymentPlan] = []

    def configure(target: rolling.Planned, hosts_: list, *_a: Any) -> PlaybookResult:
        configured.append(target.plan)
        return PlaybookResult("successful", 0, {h.name: HostResult(h.name) for h in hosts_}, site.parent)

    monkeypatch.setattr(rolling, "_configure", configure)
    monkeypatch.setattr(rolling.drain, "set_drained", lambda *_a, **_k: None)
    monkeypatch.setattr(rolling.drain, "wait_idle", lambda *_a, **_k: 0.0)
    monkeypatch.setattr(rolling.gate, "prove_batch", lambda dp, *_a: gated.append(dp) or {})
    monkeypatch.setattr(rolling.keys, "ensure_probe_key", lambda: "sk-test")
    return configured, gated


def test_a_roll_uses_the_plan_it_is_given_and_builds_only_a_rollback_s(
    site: Path, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.revisions import known_revision

    rev = known_revision(site)
    given = plan.build(rev.inventory())
    builds.clear()
    configured, gated = _rolled(site, monkeypatch)
    from installer.base.runlog import RunLog

    result = rolling.roll(rev, RunLog("upgrade", "demo"), target_plan=given)
    assert result.success, result.steps
    assert builds == [] and configured and all(p is given for p in configured + gated)


def _released(site: Path, cpus: dict[str, int]) -> None:
    """Revision 1 as `up` left it (its plan with the CPUs preflight counted), a canary revision
    as `release start` made it (stable's inventory with the canary beside it, the same counts),
    and that release at 20%, started before the release controller (no controller to ask)."""
    from installer.base.runlog import RunLog
    from installer.release import spec, state
    from installer.release.state import Release
    from tests.support.revisions import known_revision

    rev = known_revision(site)
    stable_inv = rev.inventory()
    playbooks = site.parent / "playbooks"
    counted = plan.with_cpu_counts(plan.build(stable_inv), cpus)
    stable = revisions.next_revision(stable_inv, rev.manifest(), site.parent, playbooks, deployment_plan=counted)
    revisions.record("demo", stable, {"a": True, "b": True}, RunLog("up", "demo"))
    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    target = load_inventory(site)
    both = plan.with_cpu_counts(plan.build(stable_inv, {"main": spec.served(target, "main", "site")}), cpus)
    canary = revisions.next_revision(target, rev.manifest(), site.parent, playbooks, canary="main",
                                     canary_over=stable.number, deployment_plan=both)
    state.save("demo", Release("main", "tiny", stable.number, canary.number, (20, 100), step=0))


def _configured(module: Any, monkeypatch: pytest.MonkeyPatch) -> list[plan.DeploymentPlan]:
    """The plans the release command configures the hosts with; the hosts themselves stood in for
    (stages file, drains, Ansible's result, the stage proof)."""
    seen: list[plan.DeploymentPlan] = []
    monkeypatch.setattr(module.stages, "write", lambda *_a, **_k: None)
    monkeypatch.setattr(module.drain, "set_drained", lambda *_a, **_k: None)
    monkeypatch.setattr(module.drain, "wait_idle", lambda *_a, **_k: 0.0)
    monkeypatch.setattr(module.rolling, "run_site", lambda dp, *_a, **_k: seen.append(dp))
    monkeypatch.setattr(module.gate, "play_problems", lambda *_a, **_k: {})
    return seen


def _workers(dp: plan.DeploymentPlan) -> list[Any]:
    from installer.ansible import render

    hosts = render.hosts_yaml(dp)["all"]["hosts"]
    return [hosts[h.name].get("gateway_workers") for h in dp.hosts]


def test_release_abort_builds_once_and_sizes_gateways_from_the_recorded_cpus(
    site: Path, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the gateway role's nproc: the workers the stable revision's plan resolved, as `up` gave them."""
    from installer.release import abort

    _released(site, {"a": 4, "b": 16})
    configured = _configured(abort, monkeypatch)
    builds.clear()
    result = runner.invoke(app, ["release", "abort", "-i", str(site), "-m", "main"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert len(builds) == 1  # the stable revision's plan; the canary's engines are read from its record
    (dp,) = configured
    assert _workers(dp) == [1, 2]
    assert not any(e.stage == "canary" for h in dp.hosts for e in h.engines)


def test_release_promote_sizes_gateways_from_the_recorded_cpus_and_its_revision_keeps_them(
    site: Path, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from installer.release import promote

    _released(site, {"a": 4, "b": 16})
    configured = _configured(promote, monkeypatch)
    monkeypatch.setattr(promote.release_gate, "prove_stage", lambda *_a, **_k: {})
    monkeypatch.setattr(promote.keys, "ensure_probe_key", lambda: "sk-test")
    builds.clear()
    result = runner.invoke(app, ["release", "promote", "-i", str(site), "-m", "main"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # its two plans (stable with the canary's spec beside the canary, then the inventory's own),
    # and the running canary's engines, built to compare with the first
    assert len(builds) == 3
    assert len(configured) == 2 and all(_workers(dp) == [1, 2] for dp in configured)
    assert any(e.stage == "canary" for h in configured[0].hosts for e in h.engines)
    assert not any(e.stage == "canary" for h in configured[1].hosts for e in h.engines)
    promoted = revisions.get("demo", max(revisions.host_revisions("demo").values()))
    stored = promoted.plan_record()
    assert stored is not None
    assert [(h["cpu_count"], h["gateway_workers"]) for h in stored["hosts"]] == [(4, 1), (16, 2)]


def test_release_start_builds_once_and_its_canary_revision_keeps_that_plan(
    site: Path, builds: list[Any], hosts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare's plan (stable's inventory with the canary beside the model, the CPUs preflight
    counted) is the one the hosts are configured with and the canary revision keeps; the gate and
    the first step read its engine names, none builds a plan of its own. The hosts are stood in
    for as in `up` above, plus the release controller (asked over the gateway host's socket) and
    the stage proof."""
    from installer.release import start

    first = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts["bundle"])])
    assert first.exit_code == 0, first.output
    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    configured: list[plan.DeploymentPlan] = []
    monkeypatch.setattr(start.rolling, "run_site", lambda dp, *_a, **_k: configured.append(dp))
    monkeypatch.setattr(start.gate, "play_problems", lambda *_a, **_k: {})
    monkeypatch.setattr(start.release_gate, "prove_stage", lambda *_a, **_k: {})
    monkeypatch.setattr(start.keys, "ensure_probe_key", lambda: "sk-test")
    monkeypatch.setattr(start.controller, "refuse_running", lambda _inv: None)
    monkeypatch.setattr(start.controller, "start", lambda *_a, **_k: None)
    monkeypatch.setattr(start.stages, "write", lambda *_a, **_k: None)
    builds.clear()
    result = runner.invoke(app, ["release", "start", "-i", str(site), "-m", "main", "--bundle", str(hosts["bundle"])],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert len(builds) == 1
    (dp,) = configured
    assert any(e.stage == "canary" for h in dp.hosts for e in h.engines)
    assert _workers(dp) == [1, 2]  # the CPUs preflight counted (4 and 16)
    canary = revisions.get("demo", max(revisions.host_revisions("demo").values()))
    assert canary.plan_record() == json.loads(plan_record.dump(plan_record.record(dp)))


def test_upgrade_builds_once_and_rolls_with_that_plan(
    site: Path, builds: list[Any], hosts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare's plan is the one every batch is configured and gated with; no batch rebuilds it."""
    first = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts["bundle"])])
    assert first.exit_code == 0, first.output
    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 7}"))
    configured, gated = _rolled(site, monkeypatch)
    builds.clear()
    result = runner.invoke(app, ["upgrade", "-i", str(site), "--bundle", str(hosts["bundle"])])
    assert result.exit_code == 0, result.output
    assert len(builds) == 1
    assert len(configured) == 2 and len(gated) == 2  # one batch per host
    assert all(dp is configured[0] for dp in configured + gated)
    assert "--max-num-seqs 7" in " ".join(configured[0].hosts[0].engines[0].argv)


def test_status_builds_once_per_report(site: Path, builds: list[Any]) -> None:
    """Every collector reads the report's engine names; none builds a plan of its own. The hosts
    (10.0.0.x) answer nothing: each collector records its problem and goes on, the release records'
    SSH read too, within --timeout (tests/unit/status/test_status_timeout.py)."""
    result = runner.invoke(app, ["status", "-i", str(site), "--json", "--timeout", "0.2"])
    assert result.exit_code == 0, result.output
    assert len(builds) == 1
    rows = json.loads(result.output)["rows"]
    assert [r["host"] for r in rows] == ["a", "b"]

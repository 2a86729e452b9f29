"""The release controller's ticks (service/release_controller.py) on a Store kept in memory: the
first weight, advancing along the steps after the dwell, rollback to canary 0 at once, the
blind hold, a controller that lost its lease writing nothing, and a restarted controller going
on from the recorded step (#35). The lease's scripts themselves run against a real redis-server
in tests/integration/test_release_controller.py."""

import json
from pathlib import Path
from typing import Any

import pytest

from service import release_controller, release_promql
from service.release_controller import Audit, Controller
from service.release_store import Fenced
from tests.support.recorded_prometheus import answers as _answers

SPEC = {"id": "demo/r7", "served_name": "tiny-llama", "steps": [10, 30, 100], "dwell_s": 60,
        "slo": {"window_s": 120, "min_requests": 20, "relative": True, "error_ratio_margin": 0.02,
                "ttft_p99_ratio": 1.5, "e2e_p95_ratio": 1.5, "latency_floor_s": 0.8,
                "absolute": ["e2e_p95 <= 800 ms over 2 min"]}}


class MemoryStore:
    """Store's interface (service/release_store.py), its lease a flag the test flips."""

    def __init__(self) -> None:
        self.clock = 1000.0
        self.held = True
        self.token: str | None = None
        self.spec_doc: dict[str, Any] | None = dict(SPEC)
        self.state_doc: dict[str, Any] | None = None
        self.weights_doc: dict[str, int] = {}
        self.generation = 0
        self.lease_ms = 10_000

    def now(self) -> float:
        return self.clock

    @property
    def st(self) -> dict[str, Any]:
        assert self.state_doc is not None
        return self.state_doc

    def lease(self, renew_only: bool = False) -> bool:
        self.token = "me#1" if self.held else None
        return self.held

    def give_up(self) -> None:
        self.token = None

    def spec(self) -> dict[str, Any] | None:
        return self.spec_doc

    def state(self) -> dict[str, Any] | None:
        return None if self.state_doc is None else json.loads(json.dumps(self.state_doc))

    def write(self, state: dict[str, Any], weights: dict[str, int] | None = None) -> int:
        if not self.held:
            raise Fenced("the lease passed to another controller")
        self.state_doc = json.loads(json.dumps(state))
        if weights is not None:
            self.generation += 1
            self.weights_doc = dict(weights)
        return self.generation


def _unreachable(promql: str) -> dict[str, Any]:
    raise release_promql.Unreachable("Prometheus at http://127.0.0.1:9090: connection refused")


def _tick(c: Controller) -> dict[str, Any]:
    record = c.tick()
    assert record is not None
    return record


def _controller(store: MemoryStore, query: release_promql.Query, tmp_path: Path) -> Controller:
    return Controller(store, query, Audit(tmp_path / "audit.jsonl"))  # type: ignore[arg-type]


def _audit(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_a_healthy_canary_walks_the_steps_after_each_dwell_and_is_promoted(tmp_path: Path) -> None:
    store = MemoryStore()
    c = _controller(store, _answers("healthy"), tmp_path)
    assert _tick(c)["action"] == "start" and store.weights_doc == {"tiny-llama": 10}
    for weight in (10, 30, 100):
        store.clock += 30
        assert _tick(c)["kind"] == "dwell"  # healthy, not held long enough
        store.clock += 31
        record = _tick(c)
        assert record["weight"] == weight
    assert record["action"] == "promote" and store.st["verdict"] == "promoted"
    assert store.weights_doc == {"tiny-llama": 100}
    assert c.tick() is None  # over: nothing more to decide
    actions = [(r["action"], r["weight"]) for r in _audit(tmp_path)]
    assert actions == [("start", 10), ("hold", 10), ("advance", 10), ("hold", 30), ("advance", 30),
                       ("hold", 100), ("promote", 100)]
    # each decision carries its figures
    assert _audit(tmp_path)[2]["figures"]["120s"]["canary"]["quantiles"]["e2e_p95"] == 0.64


def test_a_breach_sets_the_canary_to_0_at_once_and_the_metrics_say_so(tmp_path: Path) -> None:
    store = MemoryStore()
    c = _controller(store, _answers("slow"), tmp_path)
    c.tick()
    record = _tick(c)
    assert (record["action"], record["kind"]) == ("rollback", "breach")
    assert store.weights_doc == {"tiny-llama": 0}
    assert store.st["verdict"] == "rolled_back" and store.st["weight"] == 0
    assert "canary e2e_p95 2400 ms over 120 s > e2e_p95 <= 800 ms over 120 s" in record["reasons"]
    reg = c.metrics.registry
    assert reg.get_sample_value("pli_release_controller_verdict", {"model": "tiny-llama",
                                                                   "verdict": "rolled_back"}) == 1
    assert reg.get_sample_value("pli_release_controller_canary_weight", {"model": "tiny-llama"}) == 0
    assert reg.get_sample_value("pli_release_controller_figure", {"model": "tiny-llama", "stage": "canary",
                                                                  "window": "120", "metric": "e2e_p95"}) == 2.4
    store.spec_doc = None  # the release finished (installer release abort): the alert stops
    c.tick()
    assert reg.get_sample_value("pli_release_controller_verdict", {"model": "tiny-llama",
                                                                   "verdict": "rolled_back"}) is None


def test_prometheus_unreachable_holds_blind_for_ever_and_raises_the_blind_metric(tmp_path: Path) -> None:
    store = MemoryStore()
    c = _controller(store, _unreachable, tmp_path)
    c.tick()
    for _ in range(3):
        store.clock += 1000
        record = _tick(c)
        assert (record["action"], record["kind"]) == ("hold", "blind")
    assert store.weights_doc == {"tiny-llama": 10} and store.st["step"] == 0
    assert c.metrics.registry.get_sample_value("pli_release_controller_blind") == 1


def test_a_controller_without_the_lease_writes_nothing(tmp_path: Path) -> None:
    store = MemoryStore()
    c = _controller(store, _answers("slow"), tmp_path)
    c.tick()
    store.held = False
    assert c.tick() is None
    assert store.weights_doc == {"tiny-llama": 10} and store.st["verdict"] == "running"
    assert c.metrics.registry.get_sample_value("pli_release_controller_leader") == 0


def test_a_restarted_controller_goes_on_from_the_recorded_step(tmp_path: Path) -> None:
    store = MemoryStore()
    first = _controller(store, _answers("healthy"), tmp_path)
    first.tick()
    store.clock += 61
    first.tick()  # advanced to 30%
    step_since = store.st["step_since"]
    second = _controller(store, _answers("healthy"), tmp_path)  # the unit restarted
    store.clock += 10
    record = _tick(second)
    assert (record["action"], record["weight"], record["held_s"]) == ("hold", 30, 10)
    assert store.st["step_since"] == step_since and store.weights_doc == {"tiny-llama": 30}


def test_no_spec_no_work_and_the_lease_is_given_up(tmp_path: Path) -> None:
    store = MemoryStore()
    store.spec_doc = None
    c = _controller(store, _unreachable, tmp_path)
    assert c.tick() is None and store.state_doc is None and store.token is None


@pytest.mark.parametrize("line", ["queue_p95 <= 1 s"])
def test_a_spec_with_a_line_the_controller_cannot_read_fails_the_tick_loudly(tmp_path: Path, line: str) -> None:
    store = MemoryStore()
    store.spec_doc = {**SPEC, "slo": {**SPEC["slo"], "absolute": [line]}}  # type: ignore[dict-item]
    c = _controller(store, _answers("healthy"), tmp_path)
    c.tick()
    with pytest.raises(ValueError, match="no metric"):
        c.tick()
    assert store.weights_doc == {"tiny-llama": 10}


def test_equal_holds_are_written_once_a_minute_and_a_new_cause_at_once(tmp_path: Path) -> None:
    store = MemoryStore()
    store.spec_doc = {**SPEC, "dwell_s": 600}
    c = _controller(store, _unreachable, tmp_path)
    c.tick()
    for _ in range(31):  # a minute of ticks every 2 s, all blind
        store.clock += 2
        assert _tick(c)["kind"] == "blind"
    c.query = _answers("healthy")
    store.clock += 2
    _tick(c)  # the cause changed (dwell): written at once
    kinds = [(r["action"], r.get("kind")) for r in _audit(tmp_path)]
    assert kinds == [("start", None), ("hold", "blind"), ("hold", "blind"), ("hold", "dwell")]
    assert store.st["last"]["kind"] == "dwell"  # the state has every tick's decision


def test_a_controller_that_loses_the_lease_drops_its_release_gauges(tmp_path: Path) -> None:
    # a standby's last blind or rolled-back gauge would keep the alert rules firing
    store = MemoryStore()
    c = _controller(store, _unreachable, tmp_path)
    c.tick()
    store.clock += 1000
    _tick(c)
    assert c.metrics.registry.get_sample_value("pli_release_controller_blind") == 1
    store.held = False
    assert c.tick() is None
    assert c.metrics.registry.get_sample_value("pli_release_controller_blind") == 0
    assert c.metrics.registry.get_sample_value("pli_release_controller_canary_weight", {"model": "tiny-llama"}) is None


def _with_readiness(query: release_promql.Query, ready: float | None) -> release_promql.Query:
    """`query`, and the canary engines' readiness over 120 s: `ready`, or no series (None)."""
    engines = ["a-canary", "b-canary"]

    def answer(promql: str) -> dict[str, Any]:
        if promql == release_promql.ready_query(engines, 120):
            result = [] if ready is None else [{"metric": {}, "value": [0, str(ready)]}]
            return {"status": "success", "data": {"resultType": "vector", "result": result}}
        return query(promql)
    return answer


def test_a_canary_no_gateway_found_ready_for_a_window_is_rolled_back(tmp_path: Path) -> None:
    """Its requests cannot be counted when nobody routes to it, so the figures alone hold it for
    ever: a whole window unready with too few requests rolls back (watch's rule, kept)."""
    store = MemoryStore()
    store.spec_doc = {**SPEC, "canary_engines": ["a-canary", "b-canary"]}
    c = _controller(store, _with_readiness(_answers("few"), 0), tmp_path)
    c.tick()
    store.clock += 60  # not a whole window yet: no evidence, held
    assert _tick(c)["kind"] == "no_evidence"
    store.clock += 61
    record = _tick(c)
    assert (record["action"], record["kind"]) == ("rollback", "unready")
    assert "no gateway found a canary engine ready for 120 s" in record["reasons"][0]
    assert store.weights_doc == {"tiny-llama": 0}


@pytest.mark.parametrize("ready", [1.0, None])
def test_a_canary_found_ready_or_unreported_is_not_rolled_back_for_want_of_requests(
    tmp_path: Path, ready: float | None
) -> None:
    store = MemoryStore()
    store.spec_doc = {**SPEC, "canary_engines": ["a-canary", "b-canary"]}
    c = _controller(store, _with_readiness(_answers("few"), ready), tmp_path)
    c.tick()
    store.clock += 500
    assert (_tick(c)["action"], store.st["verdict"]) == ("hold", "running")


def test_auto_promote_off_holds_a_healthy_canary_for_a_person(tmp_path: Path) -> None:
    store = MemoryStore()
    store.spec_doc = {**SPEC, "auto_promote": False}
    c = _controller(store, _answers("healthy"), tmp_path)
    c.tick()
    store.clock += 61
    record = _tick(c)
    assert (record["action"], record["kind"]) == ("hold", "awaiting_promote")
    assert "`installer release promote` takes the next step" in record["reasons"][-1]
    assert store.weights_doc == {"tiny-llama": 10} and store.st["step"] == 0


def test_a_slow_prometheus_is_a_blind_hold_within_the_lease_and_a_lost_lease_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    now = [0.0]
    monkeypatch.setattr(release_controller.time, "monotonic", lambda: now[0])  # the one time module
    healthy = _answers("healthy")

    def slow(promql: str) -> dict[str, Any]:
        now[0] += 3  # each answer takes 3 s: the second is past half the 10 s lease
        return healthy(promql)

    c = _controller(store, slow, tmp_path)
    c.tick()
    store.clock += 61
    record = _tick(c)
    assert (record["action"], record["kind"]) == ("hold", "blind")
    assert "Prometheus answered too slowly" in record["reasons"][0]

    lost = MemoryStore()
    c = _controller(lost, healthy, tmp_path)
    c.tick()
    lost.clock += 61
    renewals = iter([True, False])  # held at the tick's start, gone once the figures are in
    monkeypatch.setattr(lost, "lease", lambda renew_only=False: next(renewals))
    assert c.tick() is None
    assert lost.st["step"] == 0 and lost.weights_doc == {"tiny-llama": 10}

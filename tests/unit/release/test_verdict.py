"""The release controller's verdicts (service/release_verdict.py) on Prometheus answers in the
shape of /api/v1/query (data/prometheus/*.json: per window and query), for each SLO kind, the
windows without evidence and without stable traffic, and Prometheus unreachable (#35)."""

import json
from pathlib import Path

import pytest

from service import release_promql, release_slo
from service.release_verdict import Policy, Relative, decide

DATA = Path(__file__).parent / "data" / "prometheus"
RELATIVE = Policy(window_s=120, min_requests=20, dwell_s=120)


def _figures(name: str) -> release_promql.Figures:
    recorded = json.loads((DATA / f"{name}.json").read_text())
    return release_promql.figures({(float(k.split("|")[0]), k.split("|")[1]): v for k, v in recorded.items()})


def _absolute(*lines: str, relative: Relative | None = None) -> Policy:
    return Policy(window_s=120, min_requests=20, dwell_s=120, relative=relative,
                  absolute=tuple(release_slo.parse(line) for line in lines))


def test_healthy_canary_holds_through_the_dwell_then_advances_and_promotes_at_the_last_step() -> None:
    f = _figures("healthy")
    held = decide(RELATIVE, f, weight=10, held_s=30, last_step=False)
    assert (held.action, held.kind) == ("hold", "dwell")
    assert decide(RELATIVE, f, weight=10, held_s=120, last_step=False).action == "advance"
    both = _absolute("e2e_p95 <= 800 ms over 2 min", "error_ratio <= 1%", relative=Relative())
    assert decide(both, f, weight=100, held_s=121, last_step=True).action == "promote"


def test_absolute_e2e_p95_breach_rolls_back_with_the_figure_and_the_limit() -> None:
    v = decide(_absolute("e2e_p95 <= 800 ms over 2 min"), _figures("slow"), weight=30, held_s=5, last_step=False)
    assert (v.action, v.kind) == ("rollback", "breach")
    assert v.reasons == ("canary e2e_p95 2400 ms over 120 s > e2e_p95 <= 800 ms over 120 s",)


def test_absolute_error_ratio_and_ttft_p99() -> None:
    errors = _figures("errors")  # 5 of 45 canary attempts failed
    v = decide(_absolute("error_ratio <= 1%"), errors, weight=10, held_s=5, last_step=False)
    assert v.action == "rollback" and "error_ratio 11.11%" in v.reasons[0]
    ok = decide(_absolute("ttft_p99 <= 250 ms", "error_ratio <= 0.2"), errors, weight=10, held_s=500,
                last_step=False)
    assert ok.action == "advance"
    slow_ttft = decide(_absolute("ttft_p99 <= 200 ms"), errors, weight=10, held_s=5, last_step=False)
    assert slow_ttft.action == "rollback" and "ttft_p99 220 ms" in slow_ttft.reasons[0]


def test_relative_rule_rolls_back_a_slow_or_failing_canary() -> None:
    slow = decide(RELATIVE, _figures("slow"), weight=30, held_s=5, last_step=False)
    assert slow.action == "rollback"
    assert any("e2e_p95 2400 ms > 1.5 x stable's 610 ms" in r for r in slow.reasons)
    errors = decide(RELATIVE, _figures("errors"), weight=30, held_s=5, last_step=False)
    assert errors.action == "rollback" and "stable's 0.00% + margin 2%" in errors.reasons[0]


def test_too_few_canary_requests_is_no_evidence_and_holds() -> None:
    for policy in (RELATIVE, _absolute("e2e_p95 <= 100 ms")):  # even a limit the figure breaks
        v = decide(policy, _figures("few"), weight=10, held_s=999, last_step=False)
        assert (v.action, v.kind) == ("hold", "no_evidence")
        assert "6 canary request(s) in 120 s, fewer than min_requests 20" in v.reasons[0]


def test_no_stable_traffic_gives_no_relative_verdict_not_a_floor_rollback() -> None:
    """The frozen-canary false rollback: canary at 1.2 s, above the floor, stable silent."""
    f = _figures("no-stable")
    v = decide(RELATIVE, f, weight=30, held_s=999, last_step=False)
    assert (v.action, v.kind) == ("hold", "no_stable_traffic")
    # an absolute SLO still judges the canary alone in that window
    both = _absolute("e2e_p95 <= 1 s", relative=Relative())
    assert decide(both, f, weight=30, held_s=999, last_step=False).action == "rollback"
    # at 100% stable is meant to be silent: the absolute checks decide
    assert decide(_absolute("e2e_p95 <= 2 s", relative=Relative()), f, weight=100, held_s=999,
                  last_step=True).action == "promote"
    # relative alone at 100%: the canary's own evidence is all there is to ask
    assert decide(RELATIVE, f, weight=100, held_s=999, last_step=True).action == "promote"
    assert decide(RELATIVE, _figures("few"), weight=100, held_s=999, last_step=True).kind == "no_evidence"


def test_prometheus_unreachable_holds_blind_and_never_promotes() -> None:
    v = decide(RELATIVE, None, weight=100, held_s=10_000, last_step=True, blind_reason="Prometheus at x: refused")
    assert (v.action, v.kind) == ("hold", "blind")
    assert v.reasons[0].startswith("Prometheus at x: refused")


def test_windows_each_objective_is_judged_over_its_own() -> None:
    policy = _absolute("e2e_p95 <= 800 ms over 5 min", "ttft_p99 <= 1 s", relative=Relative())
    assert policy.windows() == [120, 300]
    qs = release_promql.queries("tiny-llama", policy)
    assert qs[(300, "e2e_p95")] == ('histogram_quantile(0.95, sum by (stage, le) (rate('
                                    'pli_gateway_stage_request_duration_seconds_bucket{model="tiny-llama"}[300s])))')
    assert qs[(120, "requests")] == ('sum by (stage, outcome) (increase(pli_gateway_stage_requests_total'
                                     '{model="tiny-llama"}[120s]))')
    assert set(qs) == {(120, "requests"), (300, "requests"), (120, "ttft_p99"), (120, "e2e_p95"), (300, "e2e_p95")}
    # the 300 s window has no answer here: its objective has no evidence, so no advance
    v = decide(policy, _figures("healthy"), weight=10, held_s=999, last_step=False)
    assert (v.action, v.kind) == ("hold", "no_evidence")


def test_a_prometheus_error_answer_is_unreachable() -> None:
    with pytest.raises(release_promql.Unreachable, match="bad_data"):
        release_promql.figures({(120, "requests"): {"status": "error", "errorType": "bad_data", "error": "parse"}})
    with pytest.raises(release_promql.Unreachable):
        release_promql.http_query("http://127.0.0.1:9", timeout_s=0.5)("up")


@pytest.mark.parametrize(("line", "want"), [
    ("e2e_p95 <= 800 ms over 2 min", ("e2e_p95", 0.8, 120)),
    ("ttft_p99 ≤ 2 s", ("ttft_p99", 2.0, None)),
    ("error_ratio <= 1%", ("error_ratio", 0.01, None)),
    ("client_error_ratio<=0.05 over 90s", ("client_error_ratio", 0.05, 90)),
])
def test_slo_lines_as_users_write_them(line: str, want: tuple[str, float, float | None]) -> None:
    o = release_slo.parse(line)
    assert (o.metric, o.limit, o.window_s) == want


@pytest.mark.parametrize(("line", "why"), [
    ("e2e_p42 <= 800 ms", "no metric 'e2e_p42'"),
    ("queue_depth <= 3", "no metric 'queue_depth'"),
    ("e2e_p95 <= 800", "a latency: give its limit in ms or s"),
    ("error_ratio <= 5 ms", "a ratio"),
    ("error_ratio <= 150%", "at most 1"),
    ("e2e_p95 >= 800 ms", "is not an SLO line"),
    ("e2e_p95 <= 800 ms over 2 days", "is not an SLO line"),
])
def test_bad_slo_lines_say_what_is_wrong(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        release_slo.parse(line)


def test_an_slo_without_the_new_kinds_dumps_as_before_them() -> None:
    # revisions.config_digest hashes the inventory's dump: a models: inventory (whose entries
    # always carry release settings) must keep its digest when it sets neither kind
    from installer.inventory.release import SLO

    assert {"relative", "absolute"}.isdisjoint(SLO().model_dump())
    assert {"relative", "absolute"}.isdisjoint(SLO.model_validate({"window_s": 60}).model_dump(mode="json"))
    given = SLO.model_validate({"absolute": ["e2e_p95 <= 800 ms over 2 min"]}).model_dump()
    assert given["absolute"] == ["e2e_p95 <= 800 ms over 2 min"] and "relative" not in given
    assert SLO.model_validate(given) == SLO.model_validate({"absolute": ["e2e_p95 <= 800 ms over 2 min"]})


def test_client_errors_hold_the_weights_and_never_roll_back_alone() -> None:
    # one caller in the canary's bucket can send bad parameters on purpose: its 4xx must not
    # decide a rollback with nobody watching, nor let the release advance
    from service.release_verdict import StageWindow

    stable = StageWindow(requests=100, outcomes={"ok": 100})
    canary = StageWindow(requests=40, outcomes={"ok": 20, "client_error": 20})
    figures = {120.0: {"stable": stable, "canary": canary}}
    relative = Policy(window_s=120, min_requests=20, dwell_s=0, relative=Relative())
    absolute = _absolute("client_error_ratio <= 5% over 2 min")
    for policy in (relative, absolute):
        v = decide(policy, figures, weight=10, held_s=600, last_step=False)
        assert (v.action, v.kind) == ("hold", "client_errors"), v
        assert "client_error_ratio 50" in v.reasons[0]
    errors = {120.0: {"stable": stable, "canary": StageWindow(requests=40, outcomes={"ok": 20, "error": 20})}}
    assert decide(relative, errors, weight=10, held_s=600, last_step=False).action == "rollback"

"""Gray-release routing (service/stages.py, Router.stage_for): the weighted split of callers,
their stickiness, the header override, and the stages file as the gateway reads it."""

import json
import logging
import math
import os
from pathlib import Path

import pytest

from service.config import EngineConfig
from service.routing import Router, bucket
from service.stages import Split, StagesFile, parse


def _router(stages: StagesFile | None = None, canaries: int = 1) -> Router:
    engines = [EngineConfig(name=f"s{i}", url=f"http://s{i}:1", model="m") for i in range(2)]
    engines += [
        EngineConfig(name=f"c{i}", url=f"http://c{i}:1", model="m", stage="canary")
        for i in range(canaries)
    ]
    router = Router(engines, 15, stages=stages)
    for engine in router.engines:
        engine.mark_ok()
    return router


def _stages(tmp_path: Path, canary: int, sticky: str = "key") -> StagesFile:
    path, tmp = tmp_path / "stages.json", tmp_path / "stages.json.tmp"
    doc = {"models": {"m": {"weights": {"stable": 100 - canary, "canary": canary}, "sticky": sticky}}}
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # as the control machine writes it: a new file, never half of one
    return StagesFile(path, interval_s=0)


CALLERS = [f"key-{i}" for i in range(1000)]


def test_the_split_is_the_weight_within_four_sigma(tmp_path: Path) -> None:
    router = _router(_stages(tmp_path, 20))
    canary = sum(router.stage_for("m", c, None, None) == "canary" for c in CALLERS)
    n, p = len(CALLERS), 0.2
    # Each caller is a Bernoulli(0.2) draw (its hash bucket); 4 sigma of the binomial count.
    assert abs(canary - n * p) <= 4 * math.sqrt(n * p * (1 - p)), canary
    # The engine chosen for a canary caller is a canary engine, and stable's a stable one.
    for caller in CALLERS[:50]:
        stage = router.stage_for("m", caller, None, None)
        engine = router.pick("m", stage=stage)
        assert engine is not None and engine.stage == stage


def test_callers_stick_and_canary_callers_stay_when_the_weight_rises(tmp_path: Path) -> None:
    stages = _stages(tmp_path, 20)
    router = _router(stages)
    first = {c: router.stage_for("m", c, None, None) for c in CALLERS}
    for _ in range(3):
        assert {c: router.stage_for("m", c, None, None) for c in CALLERS} == first
    on_canary = {c for c, s in first.items() if s == "canary"}
    _stages(tmp_path, 50)
    stages.refresh(force=True)
    later = {c: router.stage_for("m", c, None, None) for c in CALLERS}
    assert {c for c in on_canary if later[c] != "canary"} == set()
    assert len([s for s in later.values() if s == "canary"]) > len(on_canary)  # and more came
    assert all(bucket("m", c) < 20 for c in on_canary)


def test_sticky_by_session_header_or_else_the_key(tmp_path: Path) -> None:
    router = _router(_stages(tmp_path, 20, sticky="session"))
    # One key (an application), many sessions: the sessions split, not the key.
    stages = {router.stage_for("m", "app", f"session-{i}", None) for i in range(100)}
    assert stages == {"stable", "canary"}
    # No session sent: the key decides, for every request of it alike.
    assert len({router.stage_for("m", "app", None, None) for _ in range(10)}) == 1
    keyed = _router(_stages(tmp_path, 20, sticky="key"))
    assert len({keyed.stage_for("m", "app", f"session-{i}", None) for i in range(100)}) == 1


def test_header_override_whatever_the_weights(tmp_path: Path) -> None:
    router = _router(_stages(tmp_path, 0))
    assert router.stage_for("m", "k", None, "canary") == "canary"
    router100 = _router(_stages(tmp_path, 100))
    assert router100.stage_for("m", "k", None, None) == "canary"
    assert router100.stage_for("m", "k", None, "stable") == "stable"
    assert router100.stage_for("m", "k", None, "beta") == "stable"  # no such stage: stable
    for engine in router100.engines:
        if engine.stage == "canary":
            engine.mark_failed()
    # No ready canary engine: stable, asked for or drawn.
    assert router100.stage_for("m", "k", None, "canary") == "stable"
    assert router100.stage_for("m", "k", None, None) == "stable"


def test_without_stages_everything_is_stable(tmp_path: Path) -> None:
    router = _router(None)
    assert {router.stage_for("m", c, None, None) for c in CALLERS[:100]} == {"stable"}
    # the canary engine takes no share of plain picks
    assert {router.pick("m").name for _ in range(20)} == {"s0", "s1"}  # type: ignore[union-attr]
    unknown = _stages(tmp_path, 100)  # a split for another model leaves this one alone
    unknown.path.write_text(json.dumps({"models": {"other": {"weights": {"canary": 100}}}}))  # type: ignore[union-attr]
    unknown.refresh(force=True)
    assert _router(unknown).stage_for("m", "k", None, None) == "stable"


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"models": {}, "extra": 1}', "nothing else"),
        ('{"models": {"m": {"weights": {"stable": 80, "canary": 30}}}}', "sum to 100, not 110"),
        ('{"models": {"m": {"weights": {"stable": 80.5, "canary": 19.5}}}}', "integer 0..100"),
        ('{"models": {"m": {"weights": {"stable": true, "canary": 99}}}}', "integer 0..100"),
        ('{"models": {"m": {"weights": {"stable": 120, "canary": -20}}}}', "integer 0..100"),
        ('{"models": {"m": {"weights": {"stable": 80, "beta": 20}}}}', "stable and/or canary"),
        ('{"models": {"m": {"weights": {"stable": 100}, "stcky": "key"}}}', "unknown keys ['stcky']"),
        ('{"models": {"m": {"weights": {"stable": 100}, "sticky": "ip"}}}', "key or session"),
        ('{"models": {"m": {"weights": {"canary": 100}, "first_byte_timeout_s": 0}}}', "positive"),
        ('{"models": {"m": {"weights": {"canary": 100}, "answer_timeout_s": "2"}}}', "answer_timeout_s must be"),
    ],
)
def test_stages_file_errors_name_the_problem(doc: str, problem: str) -> None:
    with pytest.raises(ValueError) as err:
        parse(doc)
    assert problem in str(err.value)


def test_stages_file_is_reread_and_a_broken_one_keeps_the_last_split(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stages.json"
    stages = StagesFile(path, interval_s=0)
    assert stages.split("m") == Split()  # no file: all stable
    path.write_text(json.dumps({"models": {"m": {"weights": {"stable": 80, "canary": 20}, "first_byte_timeout_s": 2}}}))
    assert stages.split("m") == Split(20, "key", 2.0)
    tmp = tmp_path / "stages.json.tmp"  # tmp + rename, as the control machine writes it
    tmp.write_text(json.dumps({"models": {"m": {"weights": {"stable": 50, "canary": 50}, "sticky": "session"}}}))
    os.replace(tmp, path)
    assert stages.split("m") == Split(50, "session")
    with caplog.at_level(logging.ERROR):
        path.write_text('{"models": {"m": {"weights": {"stable": 50, "canary": 5')  # half written
        assert stages.split("m") == Split(50, "session")
        path.write_text(json.dumps({"models": {"m": {"weights": {"stable": 50, "canary": 60}}}}))
        assert stages.split("m") == Split(50, "session")
    assert "must sum to 100" in caplog.text and str(path) in caplog.text
    path.unlink()
    assert stages.split("m") == Split()


def test_a_stages_file_that_cannot_be_read_keeps_the_last_split(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stages.json"
    path.write_text(json.dumps({"models": {"m": {"weights": {"stable": 70, "canary": 30}, "answer_timeout_s": 5}}}))
    stages = StagesFile(path, interval_s=0)
    assert stages.split("m") == Split(30, "key", None, 5.0)
    path.unlink()
    path.symlink_to(path)  # stat fails with an OSError that is not "no such file" (ELOOP)
    with caplog.at_level(logging.ERROR):
        assert stages.split("m") == Split(30, "key", None, 5.0)
    assert "unusable, keeping the last good one" in caplog.text


def test_engine_stage_is_validated() -> None:
    with pytest.raises(ValueError, match="stage"):
        EngineConfig(name="e", url="http://e:1", model="m", stage="Canary!")

"""The controller's weights in the gateway (service/release_weights.py, Router.stage_for): a model
the stages file gives to the controller follows the weight read from Redis, the file's weight
until one is read, and the last one read while Redis is unreachable (fail static) (#35)."""

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from service.config import EngineConfig
from service.release_weights import ControlledWeights, parse
from service.routing import Router
from service.stages import StagesFile
from service.stages import parse as parse_stages


class FakeRedis:
    def __init__(self) -> None:
        self.value: bytes | None = None
        self.down = False

    async def get(self, key: str) -> bytes | None:
        assert key == "pli:release:weights"
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return self.value

    def set(self, generation: int, models: dict[str, Any], release: str = "demo/r7") -> None:
        self.value = json.dumps({"generation": generation, "lease": "h/1#1", "release": release,
                                 "models": models}).encode()


def _router(tmp_path: Path, weights: ControlledWeights, controller: str | None = "demo/r7") -> Router:
    path = tmp_path / "stages.json"
    tmp = tmp_path / "stages.tmp"
    line: dict[str, Any] = {"weights": {"stable": 90, "canary": 10}}
    if controller is not None:
        line["controller"] = controller
    tmp.write_text(json.dumps({"models": {"m": line}}))
    os.replace(tmp, path)
    engines = [EngineConfig(name="s", url="http://s:1", model="m"),
               EngineConfig(name="c", url="http://c:1", model="m", stage="canary")]
    router = Router(engines, 15, stages=StagesFile(path, interval_s=0), weights=weights)
    for engine in router.engines:
        engine.mark_ok()
    return router


def _canary_share(router: Router) -> float:
    callers = [f"key-{i}" for i in range(1000)]
    return sum(router.stage_for("m", c, None, None) == "canary" for c in callers) / len(callers)


def test_the_gateway_follows_the_controllers_weights_and_keeps_the_last_when_redis_is_down(tmp_path: Path) -> None:
    redis = FakeRedis()
    weights = ControlledWeights(redis)
    router = _router(tmp_path, weights)
    assert 0.07 < _canary_share(router) < 0.13  # nothing read yet: the file's 10%
    redis.set(1, {"m": 0})
    asyncio.run(weights.poll())
    assert _canary_share(router) == 0  # a rollback: stable takes every caller
    redis.set(2, {"m": 100})
    asyncio.run(weights.poll())
    assert _canary_share(router) == 1
    redis.down = True
    asyncio.run(weights.poll())
    assert _canary_share(router) == 1 and weights.generation == 2  # fail static
    redis.down, redis.value = False, b"{not json"
    asyncio.run(weights.poll())
    assert _canary_share(router) == 1


def test_a_model_the_file_does_not_give_to_the_controller_ignores_redis(tmp_path: Path) -> None:
    redis = FakeRedis()
    redis.set(5, {"m": 100})
    weights = ControlledWeights(redis)
    asyncio.run(weights.poll())
    assert 0.07 < _canary_share(_router(tmp_path, weights, controller=None)) < 0.13


def test_weights_left_from_an_earlier_release_never_steer_a_new_one(tmp_path: Path) -> None:
    """A promoted release left 100 in Redis; the next release's file says 10% until its
    controller writes."""
    redis = FakeRedis()
    redis.set(9, {"m": 100}, release="demo/r6")
    weights = ControlledWeights(redis)
    asyncio.run(weights.poll())
    router = _router(tmp_path, weights, controller="demo/r7")
    assert 0.07 < _canary_share(router) < 0.13
    redis.set(10, {"m": 30}, release="demo/r7")
    asyncio.run(weights.poll())
    assert 0.25 < _canary_share(router) < 0.35


@pytest.mark.parametrize("doc", ['{"generation": 1, "release": "r", "models": {"m": 101}}', '{"models": {}}', "[]",
                                 '{"generation": 1, "release": "r", "models": {"m": true}}',
                                 '{"generation": 1, "models": {"m": 10}}'])
def test_bad_weight_documents_are_refused(doc: str) -> None:
    with pytest.raises(ValueError):
        parse(doc)


def test_the_stages_file_controller_names_a_release() -> None:
    for bad in (True, "", 7):
        doc = {"models": {"m": {"weights": {"stable": 100}, "controller": bad}}}
        with pytest.raises(ValueError, match="controller must be the release's id"):
            parse_stages(json.dumps(doc))
    doc = {"models": {"m": {"weights": {"stable": 100}, "controller": "demo/r7"}}}
    assert parse_stages(json.dumps(doc))["m"].controller == "demo/r7"

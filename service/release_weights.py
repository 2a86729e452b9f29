"""The canary weights the release controller sets (service/release_controller.py), read by the
gateway from the deployment's Redis for the models whose stages-file line names the release
(`"controller": "<release id>"`).

Polled every interval (one GET of pli:release:weights, which only the lease holder writes, so
the latest document is the one to follow; its generation is logged to tell writes apart), and
while Redis cannot be reached, or the document is missing or broken, the last weights read stay
(fail static: a Redis outage changes no caller's stage). Before any read succeeds, the stages
file's own weight stands, as it does for weights of another release than the file names.
"""

import asyncio
import json
import logging
import time
from typing import Any

from service.release_store import WEIGHTS

log = logging.getLogger("service.release_weights")


def parse(raw: bytes | str) -> tuple[int, str, dict[str, int]]:
    """(generation, release id, {served name: canary percent}), or ValueError."""
    doc = json.loads(raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("generation"), int) or not isinstance(
            doc.get("models"), dict) or not isinstance(doc.get("release"), str):
        raise ValueError("expected {generation, release, models}")
    models: dict[str, int] = {}
    for name, weight in doc["models"].items():
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
            raise ValueError(f"models.{name} must be a percent, not {weight!r}")
        models[name] = weight
    return doc["generation"], doc["release"], models


class ControlledWeights:
    def __init__(self, client: Any, interval_s: float = 1.0) -> None:
        self.client = client  # a redis.asyncio.Redis (the limiter's pool)
        self.interval_s = interval_s
        self.generation = -1
        self.release = ""
        self.models: dict[str, int] = {}
        self._last_warning = 0.0

    def canary(self, model: str, default: int, release: str) -> int:
        """The controller's weight for `model` if what was read is of `release` (the stages
        file's): weights left from an earlier release never steer a new one."""
        return self.models.get(model, default) if release == self.release else default

    async def poll(self) -> None:
        try:
            raw = await self.client.get(WEIGHTS)
            if raw is None:
                return
            generation, release, models = parse(raw)
        except Exception as exc:  # Redis down or a bad document: keep what we have
            if time.monotonic() - self._last_warning > 10:
                self._last_warning = time.monotonic()
                log.warning("release weights kept (generation %d): %s: %s", self.generation, type(exc).__name__, exc)
            return
        if (release, models) != (self.release, self.models):
            log.info("release %s weights (generation %d): %s", release, generation,
                     ", ".join(f"{m}: canary {w}%" for m, w in sorted(models.items())) or "none")
        self.generation, self.release, self.models = generation, release, models

    async def run(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(self.interval_s)

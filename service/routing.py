"""Choosing an engine: first the stage (service/stages.py: a header naming one, else the
caller's sticky bucket against the model's canary weight), then among the stage's healthy
engines of the model, fewest outstanding requests first, or pinned by a session header
(rendezvous hashing, so losing one engine moves only its sessions)."""

import asyncio
import hashlib
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.config import EngineConfig
from service.drain import DrainFile
from service.stages import CANARY, STABLE, StagesFile

if TYPE_CHECKING:
    from service.release_weights import ControlledWeights
    from service.shared import SharedState


@dataclass(slots=True, eq=False)
class Engine:
    name: str
    url: str
    model: str
    task: str
    stage: str = STABLE
    outstanding: int = 0
    healthy: bool = False
    last_ok: float = 0.0  # monotonic time of the last passed check or successful request
    # the same, but only a real request answered 2xx counts (not /health, not a client's 4xx)
    last_proven: float = 0.0
    # Streamed attempts on it waiting for their first byte (the attempt -> when it started, its
    # deadline), and when it last made progress (an event of any stream, a whole answer, an
    # answer of any status): what tells a
    # wedged engine, which still answers /health, from a busy one (stalled()).
    waiting: dict[Any, tuple[float, asyncio.Timeout]] = field(default_factory=dict)
    last_progress: float = 0.0

    def stalled(self, now: float, stall_s: float) -> bool:
        """Requests have waited past stall_s for a first byte, and none made progress since."""
        if not self.waiting:
            return False
        oldest = min(start for start, _ in self.waiting.values())
        return now - oldest > stall_s and now - self.last_progress > stall_s

    def give_up_waiting(self) -> None:
        """Expire the waiting attempts' deadlines now: each is retried on another engine. (One
        whose deadline is expiring already is retried anyway; it may not be rescheduled.)"""
        now = asyncio.get_running_loop().time()
        for _start, guard in list(self.waiting.values()):
            if not guard.expired():
                guard.reschedule(now)

    def mark_ok(self) -> None:
        self.healthy = True
        self.last_ok = self.last_proven = time.monotonic()

    def mark_alive(self) -> None:
        """/health answered: keeps an engine in rotation, but never admits one (see health.py)."""
        if self.healthy:
            self.last_ok = time.monotonic()

    def suspect(self) -> None:
        """A request to it failed: its next check is a real request, not /health."""
        self.last_proven = 0.0

    def mark_failed(self) -> None:
        self.healthy = False


class Router:
    def __init__(
        self,
        engines: list[EngineConfig],
        ready_window_s: float,
        drain: DrainFile | None = None,
        shared: "SharedState | None" = None,
        stages: StagesFile | None = None,
        weights: "ControlledWeights | None" = None,
    ) -> None:
        self.engines = [Engine(e.name, e.url, e.model, e.task, e.stage) for e in engines]
        self.ready_window_s = ready_window_s
        self.drain = drain or DrainFile(None)
        self.stages = stages or StagesFile(None)
        self.weights = weights  # the release controller's, for models the stages file gives it
        # With several workers (service/shared.py), outstanding counts are gateway-wide.
        self.shared = shared
        self.by_model: dict[str, list[Engine]] = {}
        for engine in self.engines:
            self.by_model.setdefault(engine.model, []).append(engine)
        # Each model's context: the smallest --max-model-len of its engines that say one.
        self.context: dict[str, int] = {}
        # Models whose broken streams are not resumed (EngineConfig.resume_streams).
        self.no_resume = frozenset(e.model for e in engines if not e.resume_streams)
        # Each model's family for resuming reasoning (EngineConfig.resume_family), where its engines agree.
        families: dict[str, set[str | None]] = {}
        for e in engines:
            families.setdefault(e.model, set()).add(e.resume_family)
        self.resume_family = {m: next(iter(f)) for m, f in families.items() if len(f) == 1 and None not in f}
        for config in engines:
            if config.max_model_len is not None:
                self.context[config.model] = min(config.max_model_len, self.context.get(config.model, 1 << 62))
        self._turn = itertools.count()

    def ready(self, engine: Engine) -> bool:
        """Healthy recently, and not drained by the operator (service/drain.py)."""
        return (
            engine.healthy
            and time.monotonic() - engine.last_ok < self.ready_window_s
            and engine.name not in self.drain.drained()
        )

    def begin(self, engine: Engine) -> None:
        engine.outstanding += 1
        if self.shared is not None:
            self.shared.publish(engine.name, engine.outstanding)

    def end(self, engine: Engine) -> None:
        engine.outstanding -= 1
        if self.shared is not None:
            self.shared.publish(engine.name, engine.outstanding)

    def outstanding(self, engine: Engine) -> int:
        """Requests on `engine` from this gateway: every worker's."""
        return engine.outstanding if self.shared is None else self.shared.outstanding(engine.name)

    def any_ready(self, model: str | None = None) -> bool:
        engines = self.engines if model is None else self.by_model.get(model, ())
        return any(self.ready(e) for e in engines)

    def stage_for(self, model: str, caller: str, session: str | None, asked: str | None) -> str:
        """The stage that serves a request: the one `asked` for (the stage header) if it has a
        ready engine, else stable; without a header, canary if the caller's bucket is under
        the model's canary weight and a canary engine is ready, else stable.

        The bucket is blake2b(model NUL sticky id) mod 100, the sticky id being the session
        header's value (sticky: session, when sent) or the API key's name: a caller keeps its
        stage while the weight stays, and raising the weight only moves stable callers over."""
        engines = self.by_model.get(model, ())
        if asked:
            return asked if any(e.stage == asked and self.ready(e) for e in engines) else STABLE
        split = self.stages.split(model)
        canary = split.canary
        if split.controller and self.weights is not None:
            canary = self.weights.canary(model, canary, split.controller)
        if canary <= 0 or not any(e.stage == CANARY and self.ready(e) for e in engines):
            return STABLE
        sticky = session if split.sticky == "session" and session else caller
        return CANARY if bucket(model, sticky) < canary else STABLE

    def pick(
        self,
        model: str,
        exclude: tuple[Engine, ...] = (),
        session: str | None = None,
        stage: str | None = STABLE,
    ) -> Engine | None:
        """A ready engine of the model in `stage` (None: in any stage)."""
        candidates = [
            e
            for e in self.by_model.get(model, ())
            if (stage is None or e.stage == stage) and e not in exclude and self.ready(e)
        ]
        if not candidates:
            return None
        if session:
            return max(
                candidates,
                key=lambda e: hashlib.blake2b(
                    f"{session}\0{e.name}".encode(), digest_size=8
                ).digest(),
            )
        # Ties rotate so that idle engines share the load instead of the first taking it all.
        turn = next(self._turn)
        n = len(candidates)
        load = self.outstanding
        return min(enumerate(candidates), key=lambda ie: (load(ie[1]), (ie[0] - turn) % n))[1]


def bucket(model: str, sticky_id: str) -> int:
    """A caller's place 0..99 on the model's split (big-endian 8-byte blake2b, mod 100)."""
    digest = hashlib.blake2b(f"{model}\0{sticky_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 100

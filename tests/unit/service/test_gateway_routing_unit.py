"""Engine choice: ready engines of the model, fewest outstanding first with ties rotating;
a session sticks to one engine and moves only if that engine goes."""

from service.config import EngineConfig
from service.routing import Router


def _router(n: int) -> Router:
    router = Router(
        [EngineConfig(name=f"e{i}", url=f"http://h{i}:1", model="m") for i in range(n)], 15
    )
    for engine in router.engines:
        engine.mark_ok()
    return router


def test_least_outstanding_then_rotation() -> None:
    router = _router(3)
    router.engines[0].outstanding = 2
    router.engines[1].outstanding = 1
    assert router.pick("m") is router.engines[2]
    router.engines[2].outstanding = 5
    assert router.pick("m") is router.engines[1]
    for engine in router.engines:
        engine.outstanding = 0
    assert {router.pick("m").name for _ in range(3)} == {"e0", "e1", "e2"}  # type: ignore[union-attr]


def test_unready_excluded_and_unknown_model() -> None:
    router = _router(2)
    router.engines[0].mark_failed()
    assert all(router.pick("m") is router.engines[1] for _ in range(4))
    assert router.pick("m", exclude=(router.engines[1],)) is None
    assert router.pick("other") is None
    router.engines[1].last_ok -= 16  # no passed check within the window
    assert not router.any_ready("m")


def test_affinity() -> None:
    router = _router(4)
    chosen = {s: router.pick("m", session=s) for s in map(str, range(40))}
    assert len({e.name for e in chosen.values() if e}) > 1  # sessions spread
    assert all(router.pick("m", session=s) is e for s, e in chosen.items())  # and stick
    gone = router.engines[0]
    gone.mark_failed()
    for session, engine in chosen.items():
        now = router.pick("m", session=session)
        assert now is not gone and (engine is gone or now is engine)  # only gone's sessions move


def test_health_keeps_an_engine_ready_but_never_admits_one() -> None:
    from service.health import HealthChecker

    router = Router([EngineConfig(name="e0", url="http://h0:1", model="m")], 15)
    checker = HealthChecker(router, None, 5.0, None, deep_interval_s=30.0)  # type: ignore[arg-type]
    engine = router.engines[0]
    engine.mark_alive()  # /health answered before any real request
    assert not router.ready(engine) and checker._deep(engine, engine.last_ok)
    engine.mark_ok()
    proven = engine.last_proven
    assert router.ready(engine) and not checker._deep(engine, proven + 29)
    engine.mark_alive()
    assert engine.last_proven == proven and engine.last_ok >= proven
    assert checker._deep(engine, proven + 30)  # a real request once the last is 30 s old
    engine.suspect()  # a client's request failed on it
    assert router.ready(engine) and checker._deep(engine, proven + 1)



class _Guard:
    """An asyncio.Timeout's two methods give_up_waiting uses; an expiring one refuses a reschedule
    with RuntimeError, as asyncio's does."""

    def __init__(self, expired: bool) -> None:
        self._expired = expired
        self.when_set: float | None = None

    def expired(self) -> bool:
        return self._expired

    def reschedule(self, when: float) -> None:
        if self._expired:
            raise RuntimeError("Cannot change state of expiring Timeout")
        self.when_set = when


def test_giving_up_waiting_attempts_skips_a_deadline_expiring_already() -> None:
    """The health task may run between a deadline's expiry and its attempt's wake-up: rescheduling
    that Timeout would raise and end the worker's checks."""
    import asyncio

    from service.routing import Engine

    engine = Engine("e", "http://127.0.0.1:1", "m", "generate")
    late, live = _Guard(expired=True), _Guard(expired=False)
    engine.waiting.update({"late": (0.0, late), "live": (0.0, live)})  # type: ignore[dict-item]

    async def run() -> None:
        engine.give_up_waiting()

    asyncio.run(run())
    assert live.when_set is not None and late.when_set is None


def test_a_hung_check_is_cancelled_with_the_checker() -> None:
    """The checks run as tasks of their own (a hung one must not hold the others); when the
    gateway stops and cancels the checker, the checks still running are cancelled with it
    instead of outliving the HTTP session (review)."""
    import asyncio

    from service.health import HealthChecker

    class _Gauge:
        def labels(self, *args: object) -> "_Gauge":
            return self

        def set(self, value: object) -> None:
            pass

    class _Metrics:
        engine_healthy = _Gauge()

    async def scenario() -> bool:
        router = Router([EngineConfig(name="e0", url="http://h0:1", model="m")], 15)
        checker = HealthChecker(router, None, 0.05, _Metrics(), deep_interval_s=30.0)  # type: ignore[arg-type]
        hung = asyncio.Event()

        async def check(engine: object, deep: bool) -> None:
            hung.set()
            await asyncio.sleep(3600)

        checker.check = check  # type: ignore[method-assign]
        runner = asyncio.create_task(checker.run())
        await asyncio.wait_for(hung.wait(), 5)
        (task,) = checker._checks.values()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        return task.cancelled()

    assert asyncio.run(scenario())

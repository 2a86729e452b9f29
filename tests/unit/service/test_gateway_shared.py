"""The workers' shared memory (service/shared.py): one set of buckets and outstanding counts
for every process that attached to it, including processes forked after it was made."""

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from service.auth import ApiKey
from service.shared import SharedLimiter, SharedState


def _key(name: str, rpm: int | None = None, tpm: int | None = None) -> ApiKey:
    return ApiKey(name=name, digest=b"\0" * 32, rpm=rpm, tpm=tpm)


def _in_child(state: SharedState, index: int, work: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            state.attach(index)
            code = work()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_key_bucket_is_shared_across_forked_workers(tmp_path: Path) -> None:
    state = SharedState(2, ["e"], tmp_path / "lock")
    key = _key("k", rpm=5)

    def child_takes_three() -> int:
        limiter = SharedLimiter(state)
        waits = [asyncio.run(limiter.reserve(key, 0)) for _ in range(3)]
        return 0 if waits == [0.0, 0.0, 0.0] else 3

    assert _in_child(state, 1, child_takes_three) == 0
    state.attach(0)
    limiter = SharedLimiter(state)
    waits = [asyncio.run(limiter.reserve(key, 0)) for _ in range(3)]
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0  # 3 + 2 = the key's 5 per minute
    other = _key("other", rpm=5)
    assert asyncio.run(limiter.reserve(other, 0)) == 0.0  # another key, another bucket


def test_tokens_are_reserved_and_given_back(tmp_path: Path) -> None:
    state = SharedState(1, ["e"], tmp_path / "lock")
    state.attach(0)
    limiter = SharedLimiter(state)
    key = _key("t", tpm=1000)
    assert asyncio.run(limiter.reserve(key, 900)) == 0.0
    assert asyncio.run(limiter.reserve(key, 900)) > 0
    asyncio.run(limiter.adjust(key, 850))  # it used 50
    assert asyncio.run(limiter.reserve(key, 900)) == 0.0


def test_outstanding_counts_add_up_and_a_dead_worker_is_cleared(tmp_path: Path) -> None:
    state = SharedState(3, ["a", "b"], tmp_path / "lock")

    def child_has_two_on_b() -> int:
        state.publish("b", 2)
        return 0

    assert _in_child(state, 2, child_has_two_on_b) == 0
    state.attach(0)
    state.publish("b", 1)
    state.publish("a", 4)
    assert (state.outstanding("a"), state.outstanding("b")) == (4, 3)
    state.clear_worker(2)  # the supervisor, once worker 2 is gone
    assert (state.outstanding("a"), state.outstanding("b")) == (4, 1)

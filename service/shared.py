"""Memory the gateway's worker processes share, so that several workers act as one gateway.

With `workers > 1` (service/prefork.py) each worker is a whole gateway process on the same
listening socket. Two things must still be gateway-wide, not per worker:
  - the per-key rate limits (a key with rpm 4 gets 4 requests from the gateway, whichever
    worker accepts them), unless Redis already shares them between gateways;
  - the requests outstanding on each engine: least-outstanding routing should see every
    worker's requests, and a rolling upgrade waits until the gateway (not one worker, the one
    its /readyz poll happened to reach) has none left on a drained engine.

Both live in one anonymous shared mapping made before the fork. Outstanding counts are a row
per worker, written only by that worker (no lock; readers add the rows up), and cleared by the
supervisor when a worker dies, since its requests died with it. Buckets are a small open-
addressing table keyed by a hash of the key name, updated under an flock: an flock is released
by the kernel when its holder dies, where a semaphore held by a killed worker would block the
others forever. Every operation is a few microseconds, so they run on the event loop.
"""

import fcntl
import hashlib
import mmap
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from service.auth import ApiKey
from service.limits import Bucket, give_back, refill, take

_COUNT = struct.Struct("<q")
_SLOT = struct.Struct("<Qddd")  # key-name hash (0: free), requests, tokens, stamp


class SharedState:
    """Created by the supervisor before forking; every worker then calls `attach(index)`."""

    def __init__(self, workers: int, engines: list[str], lock_path: Path, slots: int = 8192) -> None:
        self.workers = workers
        self.engines = {name: i for i, name in enumerate(engines)}
        self.slots = slots
        self._rows = workers * len(engines) * _COUNT.size
        self._mem = mmap.mmap(-1, self._rows + slots * _SLOT.size)  # MAP_SHARED | MAP_ANONYMOUS
        self.lock_path = lock_path
        lock_path.touch(mode=0o600)
        self.index = -1
        self._lock_fd = -1

    def attach(self, index: int) -> None:
        """In a worker: its own row, and its own open file for the lock (flock locks belong to
        an open file, so a descriptor inherited from the supervisor would not exclude)."""
        self.index = index
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC)

    # -- requests outstanding per engine ------------------------------------------------------

    def _at(self, worker: int, engine: int) -> int:
        return (worker * len(self.engines) + engine) * _COUNT.size

    def publish(self, engine: str, outstanding: int) -> None:
        """This worker's count for `engine`."""
        _COUNT.pack_into(self._mem, self._at(self.index, self.engines[engine]), outstanding)

    def outstanding(self, engine: str) -> int:
        i = self.engines[engine]
        return sum(_COUNT.unpack_from(self._mem, self._at(w, i))[0] for w in range(self.workers))

    def clear_worker(self, worker: int) -> None:
        """In the supervisor, once a worker is gone."""
        start = self._at(worker, 0)
        self._mem[start : start + len(self.engines) * _COUNT.size] = bytes(len(self.engines) * _COUNT.size)

    # -- rate-limit buckets -------------------------------------------------------------------

    def _slot(self, name: str) -> tuple[int, int]:
        """The byte offset of `name`'s bucket (found, or claimed) and its tag. Caller holds the lock."""
        tag = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") or 1
        for probe in range(self.slots):
            at = self._rows + ((tag + probe) % self.slots) * _SLOT.size
            seen = _SLOT.unpack_from(self._mem, at)[0]
            if seen == tag:
                return at, tag
            if seen == 0:
                _SLOT.pack_into(self._mem, at, tag, float("nan"), 0.0, 0.0)
                return at, tag
        # Thousands of distinct keys used since start: far beyond what the table is sized for.
        raise RuntimeError(f"rate-limit table full ({self.slots} keys)")

    def update(self, key: ApiKey, change: Callable[[Bucket], float | None]) -> float:
        """Refill `key`'s bucket, apply `change` to it, store it; what `change` returned."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            at, tag = self._slot(key.limit_name)
            _, requests, tokens, stamp = _SLOT.unpack_from(self._mem, at)
            now = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the host
            if requests != requests:  # NaN: a new bucket starts full
                bucket = Bucket(key.rpm or 0, key.tpm or 0, now)
            else:
                bucket = Bucket(requests, tokens, stamp)
            refill(bucket, key, now)
            result = change(bucket)
            _SLOT.pack_into(self._mem, at, tag, bucket.requests, bucket.tokens, bucket.stamp)
            return result or 0.0
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


class SharedLimiter:
    """LocalLimiter's buckets, shared by the workers of one gateway."""

    def __init__(self, state: SharedState) -> None:
        self.state = state

    async def reserve(self, key: ApiKey, tokens: int, requests: int = 1) -> float:
        return self.state.update(key, lambda bucket: take(bucket, key, tokens, requests))

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        if key.tpm:
            self.state.update(key, lambda bucket: give_back(bucket, key, tokens))

    async def close(self) -> None:
        return None

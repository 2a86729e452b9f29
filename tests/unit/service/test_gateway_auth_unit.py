"""The key ring: bearer parsing, expiry, and reload when the hosts' file changes."""

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.auth import ANONYMOUS, KeyRing
from service.errors import GatewayError
from service.keyfile import HostKey, HostKeyFile, hash_secret


def _write(path: Path, *keys: HostKey) -> None:
    path.write_text(HostKeyFile(keys=list(keys)).model_dump_json())


def test_authenticate(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _write(
        path,
        HostKey(name="a", sha256=hash_secret("sk-a"), rpm=5, models=["m"]),
        HostKey(name="old", sha256=hash_secret("sk-old"), expires=datetime.now(UTC) - timedelta(1)),
    )
    ring = KeyRing(path)
    key = ring.authenticate("Bearer sk-a")
    assert (key.name, key.rpm, key.allows("m"), key.allows("x")) == ("a", 5, True, False)
    assert ring.authenticate("bearer  sk-a ").name == "a"
    for header, code in (
        (None, "missing_api_key"),
        ("Basic sk-a", "invalid_api_key"),
        ("Bearer ", "invalid_api_key"),
        ("Bearer sk-b", "invalid_api_key"),
        ("Bearer sk-old", "expired_api_key"),
    ):
        with pytest.raises(GatewayError) as info:
            ring.authenticate(header)
        assert (info.value.status, info.value.code) == (401, code)


def test_anonymous() -> None:
    assert KeyRing(None).authenticate(None) is ANONYMOUS


def test_reload_on_change_keeps_keys_on_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _write(path, HostKey(name="a", sha256=hash_secret("sk-a")))
    ring = KeyRing(path)

    async def run() -> None:
        watcher = asyncio.create_task(ring.watch(interval=0.05))
        _write(path, HostKey(name="b", sha256=hash_secret("sk-b")))
        os.utime(path, ns=(1, 10**18))  # a different mtime even on coarse clocks
        # polled every 0.05 s; on a loaded machine the first poll can come late, so wait for it
        # (bounded) instead of a fixed sleep
        for _ in range(400):
            try:
                if ring.authenticate("Bearer sk-b").name == "b":
                    break
            except GatewayError:
                pass
            await asyncio.sleep(0.025)
        assert ring.authenticate("Bearer sk-b").name == "b"
        path.write_text("{broken")
        await asyncio.sleep(0.3)
        assert ring.authenticate("Bearer sk-b").name == "b"
        watcher.cancel()

    asyncio.run(run())


def test_bad_file_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [{"name": "a", "sha256": "short"}]}')
    with pytest.raises(ValueError):
        KeyRing(path)

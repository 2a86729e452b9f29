"""The gateway's in-flight cap holds while callers are being identified (#38 review): a token
check may await (a JWKS fetch for an unknown kid), so the slot is taken before it, and requests
arriving together cannot all pass the cap's check first."""

import asyncio
from typing import Any

from service.accesslog import RequestInfo
from service.auth import ApiKey
from service.limits import Admission, AdmissionMiddleware, BodyPolicy
from service.metrics import Metrics


class SlowKeys:
    """identify() waits until released, as a JWKS refetch would."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.identifying = 0

    async def identify(self, authorization: str | None) -> ApiKey:
        self.identifying += 1
        await self.release.wait()
        return ApiKey(name="jwt/x.0123456789ab", digest=b"")


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _request(middleware: AdmissionMiddleware) -> int:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/models",
        "headers": [],
        "state": {"info": RequestInfo(request_id="r", start=0.0)},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware(scope, receive, send)
    return int(sent[0]["status"])


def test_requests_waiting_on_identification_hold_their_slots() -> None:
    async def run() -> tuple[list[int], int, int]:
        keys = SlowKeys()
        admission = Admission(max_in_flight=2)
        middleware = AdmissionMiddleware(_app, admission, keys, BodyPolicy(1024, 5.0), Metrics())  # type: ignore[arg-type]
        tasks = [asyncio.create_task(_request(middleware)) for _ in range(5)]
        await asyncio.sleep(0.05)
        waiting, held = keys.identifying, admission.in_flight
        keys.release.set()
        return sorted(await asyncio.gather(*tasks)), waiting, held

    statuses, waiting, held = asyncio.run(run())
    assert (waiting, held) == (2, 2)  # only two got past the cap into identify
    assert statuses == [200, 200, 503, 503, 503]

"""What a limit or quota check does when the deployment's Redis cannot be reached: the operator's
choice, `limits.redis_on_unavailable` (the inventory's `redis.on_unavailable`).

open (the default): the request is admitted without that check; limits protect fairness, and
authentication stays local. closed: a request whose key has a limit or a quota is refused with
503, OpenAI's error body and a Retry-After, so no caller can spend past its quota while the
count is out of reach. Either way the check is counted in
`pli_gateway_redis_unavailable_total{check, action}` (alerted: PLIGatewayRedisUnavailable) and
in `pli_gateway_limiter_errors_total`, and logged at most every 10 s.
"""

import logging
import time
from typing import Literal

from service.errors import GatewayError
from service.metrics import Metrics

# Long enough that clients do not hammer a gateway whose Redis is restarting (systemd restarts
# it in about a second; a lost host takes longer), short enough to be back soon after it is.
RETRY_AFTER_S = 5
_LOG_EVERY_S = 10.0


class RedisOutage:
    def __init__(self, mode: Literal["open", "closed"], metrics: Metrics, log: logging.Logger) -> None:
        self.mode = mode
        self._metrics = metrics
        self._log = log
        self._last_warning = 0.0

    def _warn(self, what: str, exc: BaseException) -> None:
        self._metrics.limiter_errors.inc()
        if time.monotonic() - self._last_warning > _LOG_EVERY_S:
            self._last_warning = time.monotonic()
            self._log.warning("%s: redis unavailable: %s", what, exc)

    def after(self, what: str, exc: BaseException) -> None:
        """A write after the answer (a reconciliation, usage recorded) failed: nothing to refuse."""
        self._warn(what, exc)

    def check(self, check: Literal["limits", "quota"], exc: BaseException) -> None:
        """A check before the request failed: return to admit it (open), or raise 503 (closed)."""
        refuse = self.mode == "closed"
        self._metrics.redis_unavailable.labels(check, "refused" if refuse else "admitted").inc()
        self._warn(f"{'refusing' if refuse else 'admitting'} requests with {check}", exc)
        if refuse:
            raise GatewayError(
                503,
                f"The gateway cannot check this key's {'rate limits' if check == 'limits' else 'token quota'} "
                "right now (its store is unreachable); retry later.",
                "server_error",
                "limits_unavailable",
                {"Retry-After": str(RETRY_AFTER_S)},
            )

"""Which engine attempts count as a gray release's evidence (`pli_gateway_stage_*`, the figures
`installer release watch` judges a canary by), and which are left out of it.

Left out, and counted in `pli_gateway_unjudged_requests_total` by reason instead:
  - `forced`: a request that named its stage (the stage header, which only release testers and
    the installer's probe key may send): the caller chose the engine, so its outcome says
    nothing of how the stage serves the traffic split to it. Otherwise a key holder could send
    a healthy canary bad requests to have it rolled back, or a failing one good requests to
    have it advanced;
  - `key_share`: one key's attempts on a (model, stage) past its share of the current window,
    so that no single caller, sticky to one stage, outweighs the others.

The share is counted per gateway process, over fixed windows: a key's attempt counts while the
key has fewer than max(floor, share x the window's counted attempts) in it. The floor keeps a
deployment of few keys judged at all; anonymous gateways (no keys: labs) are one caller and
are not capped.
"""

import time
from dataclasses import dataclass, field

FORCED, KEY_SHARE = "forced", "key_share"


@dataclass(slots=True)
class _Window:
    start: float
    total: int = 0
    by_key: dict[str, int] = field(default_factory=dict)


class EvidenceCap:
    def __init__(self, window_s: float, floor: int, share: float) -> None:
        self.window_s, self.floor, self.share = window_s, floor, share
        self._windows: dict[tuple[str, str], _Window] = {}

    def admit(self, model: str, stage: str, key: str, now: float | None = None) -> bool:
        """Whether this attempt of `key` counts; if it does, it is counted."""
        now = time.monotonic() if now is None else now
        window = self._windows.get((model, stage))
        if window is None or now - window.start >= self.window_s:
            window = self._windows[(model, stage)] = _Window(now)
        had = window.by_key.get(key, 0)
        if had >= max(self.floor, self.share * window.total):
            return False
        window.by_key[key] = had + 1
        window.total += 1
        return True

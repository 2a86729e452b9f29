"""Gray releases: each model's traffic split between the stages of its engines.

`installer release` writes the stages file on every gateway host (tmp + rename):

    {"models": {"<served name>": {"weights": {"stable": 80, "canary": 20}, "sticky": "key",
                                  "first_byte_timeout_s": 10, "answer_timeout_s": 120}}}

`weights` are integers 0..100 summing to 100; `sticky` (optional, default "key") says what
keeps a caller on one stage: its API key, or ("session") the session header's value when the
request sends one; `first_byte_timeout_s` (optional) overrides the gateway's
canary_first_byte_timeout_s for the model's streamed canary answers, `answer_timeout_s`
(optional) its canary_answer_timeout_s for whole (not streamed) ones; `controller` (optional)
names a release whose controller on the monitoring host sets the canary's weight in Redis
(service/release_weights.py), the file's weights standing until the gateway read that release's. A model that is not in
the file, or no file at all, sends everything to stable.

Re-read like the drain file (service/drain.py): a file a gateway restarted mid-release reads
back, no admin endpoint to guard, and a broken file keeps the last good split.
"""

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.watched import WatchedFile

log = logging.getLogger(__name__)

STABLE, CANARY = "stable", "canary"
_MODEL_KEYS = frozenset({"weights", "sticky", "first_byte_timeout_s", "answer_timeout_s", "controller"})


@dataclass(frozen=True, slots=True)
class Split:
    canary: int = 0  # percent of the model's callers sent to the canary
    sticky: str = "key"  # "key" | "session"
    first_byte_timeout_s: float | None = None  # a streamed canary answer's first byte
    answer_timeout_s: float | None = None  # a whole canary answer (its first byte is its end)
    # The id of the release whose controller sets the weight in Redis (service/release_weights.py);
    # `canary` stands until the gateway has read that release's weights. None: the file's weight.
    controller: str | None = None


NO_SPLIT = Split()


def parse(text: str) -> dict[str, Split]:
    """The splits in a stages file's text, or ValueError naming the problem."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"models"}:
        raise ValueError('expected {"models": {...}} and nothing else')
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise ValueError("models must be an object of served name -> split")
    return {name: _split(name, entry) for name, entry in models.items()}


def _split(name: str, entry: Any) -> Split:
    if not isinstance(entry, dict):
        raise ValueError(f"models.{name} must be an object")
    if unknown := set(entry) - _MODEL_KEYS:
        raise ValueError(f"models.{name}: unknown keys {sorted(unknown)} (known: {sorted(_MODEL_KEYS)})")
    weights = entry.get("weights")
    if not isinstance(weights, dict) or not weights or set(weights) - {STABLE, CANARY}:
        raise ValueError(f"models.{name}.weights must map stable and/or canary to a percent")
    for stage, weight in weights.items():
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
            raise ValueError(f"models.{name}.weights.{stage} must be an integer 0..100, not {weight!r}")
    if sum(weights.values()) != 100:
        raise ValueError(f"models.{name}.weights must sum to 100, not {sum(weights.values())}")
    sticky = entry.get("sticky", "key")
    if sticky not in ("key", "session"):
        raise ValueError(f"models.{name}.sticky must be key or session, not {sticky!r}")
    first_byte, answer = (_seconds(name, entry, k) for k in ("first_byte_timeout_s", "answer_timeout_s"))
    controller = entry.get("controller")
    if controller is not None and (not isinstance(controller, str) or not controller):
        raise ValueError(f"models.{name}.controller must be the release's id, not {controller!r}")
    return Split(weights.get(CANARY, 0), sticky, first_byte, answer, controller)


def _seconds(name: str, entry: dict[str, Any], key: str) -> float | None:
    timeout = entry.get(key)
    if timeout is None:
        return None
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout < float("inf"):
        raise ValueError(f"models.{name}.{key} must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _describe(splits: dict[str, Split]) -> str:
    shown = ", ".join(f"{m}: canary {s.canary}%" for m, s in sorted(splits.items()))
    return f"release stages: {shown or 'all stable'}"


class StagesFile(WatchedFile[dict[str, Split]]):
    def __init__(self, path: Path | None, interval_s: float = 1.0) -> None:
        super().__init__(path, parse, {}, "stages file", _describe, interval_s)

    def split(self, model: str) -> Split:
        return self.value().get(model, NO_SPLIT)

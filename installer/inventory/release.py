"""A model's gray-release settings (`models[].release`): the canary's steps and the SLO it is
judged by (installer/release/, service/release_slo.py)."""

from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from installer.inventory.fields import Strict, unset_dropped
from service import release_slo


def _slo_line(text: str) -> str:
    """An absolute SLO line the release controller can judge (ValueError names what is wrong)."""
    release_slo.parse(text)
    return text


class SLO(Strict):
    """How a canary is judged against stable during a gray release (installer/release/)."""

    window_s: Annotated[float, Field(gt=0, le=86_400)] = 120  # sliding window of the comparison
    min_requests: Annotated[int, Field(ge=1, le=1_000_000)] = 20  # no verdict on fewer canary requests
    error_ratio_margin: Annotated[float, Field(ge=0, le=1)] = 0.02  # canary's error ratio over stable's
    ttft_p99_ratio: Annotated[float, Field(ge=1, le=1000)] = 1.5  # canary TTFT p99 at most this x stable's
    e2e_p95_ratio: Annotated[float, Field(ge=1, le=1000)] = 1.5  # canary e2e p95 at most this x stable's
    latency_floor_s: Annotated[float, Field(ge=0, le=3600)] = 0.8  # ... unless under this
    # A streamed canary answer with no first byte by then is retried on stable.
    canary_first_byte_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10
    # A whole (not streamed) canary answer, which comes all at once, with none by then: the same.
    canary_answer_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120
    # The canary against stable (the ratios and margin above) over window_s; false: absolute only.
    relative: bool = True
    # The canary alone against limits, one line each: `e2e_p95 <= 800 ms over 2 min`
    # (service/release_slo.py, the grammar the release controller reads them with).
    absolute: list[Annotated[str, AfterValidator(_slo_line)]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump_kinds_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), ("relative", "absolute"))

    @model_validator(mode="after")
    def _judged(self) -> "SLO":
        if not self.relative and not self.absolute:
            raise ValueError("relative is false and absolute lists nothing: the canary would never be judged; "
                             "keep relative: true or add absolute lines (e.g. `e2e_p95 <= 800 ms over 2 min`)")
        return self


class ReleaseSettings(Strict):
    """A model's gray-release settings: the canary's weight per step and the SLO it must keep."""

    steps: Annotated[list[Annotated[int, Field(ge=1, le=100)]], Field(min_length=1)] = Field(
        default_factory=lambda: [20, 50, 100]
    )
    sticky: Literal["key", "session"] = "key"  # session: the gateway's session header, else the key
    auto_promote: bool = False  # a step held step_hold_s with healthy figures promotes itself
    step_hold_s: Annotated[float, Field(gt=0, le=86_400)] = 120
    slo: SLO = SLO()

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[int]) -> list[int]:
        if any(b <= a for a, b in pairwise(value)) or value[-1] != 100:
            raise ValueError(
                f"{value} are not canary weights in percent that rise strictly and end at 100 "
                "(e.g. [20, 50, 100])"
            )
        return value

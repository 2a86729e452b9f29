"""The models served: `model:` or the `models:` entries, their API names, and the merged form the
plan deploys (ServedModel)."""

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from installer.inventory import profiles, weights_source
from installer.inventory.engine import Engine, ModelEngine
from installer.inventory.fields import LocalPath, Name, Strict, matching, unset_dropped
from installer.inventory.release import ReleaseSettings

# The name clients send as `model`, in vLLM's usual form too (Qwen/Qwen2.5-7B-Instruct): parts
# separated by '/', each starting with a letter or digit, so no empty, '.' or '..' part.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*")
SERVED_NAME_MAX = 128
_SERVED_NAME_SHAPE = (
    "'/'-separated parts of letters, digits, '.', '_' or '-', each starting with a letter or "
    "digit, no '..', e.g. Qwen/Qwen2.5-7B-Instruct or deepseek-r1-7b"
)


def check_served_name(value: str) -> str:
    """A model's API name; ValueError saying which rule it breaks."""
    if len(value) > SERVED_NAME_MAX:
        raise ValueError(f"{value!r} is not a model name: {len(value)} characters, at most {SERVED_NAME_MAX}")
    if not SERVED_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a model name: {_SERVED_NAME_SHAPE}")
    if "--" in value:
        # Model.dir_name writes '/' as '--': with '--' in a name, two names could share a folder.
        raise ValueError(
            f"{value!r} is not a model name: '--' is reserved (the weights' folder on the hosts "
            "writes '/' as '--', e.g. Qwen/Qwen2.5-7B-Instruct in Qwen--Qwen2.5-7B-Instruct); use one '-'"
        )
    if value.endswith(".canary"):
        # A gray release puts a canary's new weights in `<folder>.canary` beside stable's.
        raise ValueError(
            f"{value!r} is not a model name: a name ending '.canary' is reserved (a gray release's canary "
            "weights go to the folder <model>.canary on the hosts); pick another name"
        )
    return value


def model_dir_name(name: str) -> str:
    """The weights' folder under the hosts' models/ for a served name: one path component
    (no '/', never '.' or '..'), and a different one for every name check_served_name() accepts,
    since those never hold '--'."""
    return name.replace("/", "--")


def _profile_name(value: str) -> str:
    if value not in profiles.CHOICES:
        raise ValueError(f"unknown profile {value!r}; use one of {', '.join(profiles.CHOICES)}")
    return value


# A parser's name as vLLM registers it (installer/inventory/vllm_names.json lists the bundled
# engines' own; the checks refuse any other), or `none` for no parser.
ParserName = Annotated[str, matching(
    r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "a vLLM parser name such as deepseek_r1, or none"
)]
SERVING_KEYS = frozenset({"profile", "reasoning_parser", "tool_call_parser", "mtp_tokens"})
# ...and the weights' source: left unset, a model dumps as before it existed (the config digest)
PASSED_KEYS = SERVING_KEYS | {"source", "resume_streams", "distribute", "fanout_min_rate_mb_s"}


class _Serving(Strict):
    """How vLLM serves the model's family (installer/inventory/profiles.py): `profile` chooses
    the flags, the other three override what it chose."""

    profile: Annotated[str, AfterValidator(_profile_name)] = profiles.AUTO
    reasoning_parser: ParserName | None = None
    tool_call_parser: ParserName | None = None
    # MTP speculative decoding's num_speculative_tokens; 0: off; None: the profile's choice.
    mtp_tokens: Annotated[int, Field(ge=0, le=16)] | None = None
    # Where the hosts get the weights: the bundle, or by reference (docs/weights.md).
    source: weights_source.WeightsSource = "bundle"
    # How bundled weights reach the hosts (docs/weights.md, "Fan-out between hosts"): push, a
    # copy from the control machine to each host; fanout, one copy to the first host, which
    # the others fetch from each other (installer/weights/fanout.py).
    distribute: Literal["push", "fanout"] = "push"
    # The slowest link rate between the fan-out's hosts to allow for, in MB/s: the servers'
    # deadline grows from it and the weights' size (installer/weights/fanout.py, Deadline). The
    # default, 100: a 1 Gbit/s link at ~80% of its line rate; slower or shared links set it lower.
    fanout_min_rate_mb_s: Annotated[float, Field(gt=0, le=100_000)] = 100.0
    # A stream whose engine breaks off after its first byte goes on from another engine of the
    # model (service/stream_resume.py, docs/failover.md); false: it ends with the error event.
    resume_streams: bool = True

    @field_validator("fanout_min_rate_mb_s")
    @classmethod
    def _rate_of_a_fanout(cls, rate: float, info: ValidationInfo) -> float:
        # only when given (pydantic skips defaults), at its own line; distribute is checked before it
        # a distribute that failed its own check is not in info.data: its error is the one to show
        if "distribute" in info.data and info.data["distribute"] != "fanout":
            raise ValueError("fanout_min_rate_mb_s sets the weights fan-out's deadline, and this model is "
                             "pushed (distribute: push): remove it, or set distribute: fanout")
        return rate

    @model_validator(mode="after")
    def _fanout_of_bundled_weights(self) -> "_Serving":
        if self.distribute == "fanout" and weights_source.by_reference(self.source):
            raise ValueError("distribute: fanout moves weights the bundle carries; with source hosts: or "
                             "mirror: nothing is pushed (remove distribute, or set source: bundle)")
        return self

    @model_serializer(mode="wrap")
    def _dump_serving_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), PASSED_KEYS)

    def serving(self) -> dict[str, Any]:
        """The serving settings and weights source given, to pass on to another model object."""
        return {k: getattr(self, k) for k in PASSED_KEYS & self.model_fields_set}


class Model(_Serving):
    path: LocalPath = Field(description="weights directory on the control machine (has config.json)")
    served_name: Annotated[str, AfterValidator(check_served_name)]

    @property
    def dir_name(self) -> str:
        """The weights' folder on every host (a property, not a field: the revision's config
        digest, made from the fields, stays what it was)."""
        return model_dir_name(self.served_name)


Task = Literal["generate", "embed", "score"]
# A `models:` entry's name: unit suffix (private-llm-engine-<name>), engine names
# (<host>-<name>[-canary], at most 64 characters at the gateway) and `release --model <name>`.
ModelName = Annotated[str, matching(
    r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?",
    "a model name: up to 20 lowercase letters, digits and '-', starting with a letter (e.g. chat)",
)]


class ModelEntry(_Serving):
    """One model of `models:`: its weights, what it serves, where and how its engines run."""

    name: ModelName
    served_name: Annotated[str, AfterValidator(check_served_name)]
    path: LocalPath = Field(description="weights directory on the control machine (has config.json)")
    # generate: chat and completions; embed: /v1/embeddings; score: a cross-encoder (/v1/rerank, /v1/score)
    task: Task = "generate"
    hosts: Annotated[list[Name], Field(min_length=1)] | None = None  # None: every serving host
    engine: ModelEngine = ModelEngine()
    release: ReleaseSettings = ReleaseSettings()

    @property
    def model(self) -> Model:
        return Model(path=self.path, served_name=self.served_name, **self.serving())


@dataclass(frozen=True)
class ServedModel:
    """A model as the plan deploys it: its engine settings merged over the top-level ones, and
    the serving hosts that run it (Inventory.served_models)."""

    name: str
    model: Model
    task: Task
    engine: Engine
    hosts: tuple[str, ...]
    release: ReleaseSettings = field(default_factory=ReleaseSettings)

    @property
    def served_name(self) -> str:
        return self.model.served_name

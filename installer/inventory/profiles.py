"""Serving profiles: the vLLM flags a model family needs to serve as its users call it.

A DeepSeek model writes its reasoning between `<think>` markers and its tool calls between
DeepSeek's own tool-call markers (checkpoint.TOOL_CALLS), and V3-class checkpoints carry an MTP layer for speculative
decoding. vLLM serves all of it, but only when told: `--reasoning-parser` (reasoning goes to
`reasoning_content`, not `content`), `--tool-call-parser` with `--enable-auto-tool-choice`
(tool calls come back as `tool_calls`, not text) and `--speculative-config` with method "mtp".
A model's `profile` chooses them: `auto` (the default) reads the checkpoint
(installer/inventory/checkpoint.py), `none` adds nothing, or a profile's name; the model's
`reasoning_parser`, `tool_call_parser` and `mtp_tokens` override what the profile chose.

fp8 weights need no flag: vLLM reads `quantization_config` from config.json and serves the
weights as they are (vllm/config/model.py `_verify_quantization`).

Every name here is one the bundled vLLM registers (installer/inventory/vllm_names.json, read from
the wheels): DeepSeek-V2 has no parser of its own in it, V3 and R1 share the `deepseek_v3` tool
parser, V3.1 and V3.2 switch reasoning on per request (`chat_template_kwargs: {"thinking":
true}`), which the `deepseek_v3` reasoning parser follows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from installer.inventory import checkpoint
from installer.inventory.checkpoint import Checkpoint

AUTO = "auto"
NONE = "none"
# vLLM 0.26.0's method for every MTP draft (vllm/config/speculative.py MTPModelTypes; it rewrites
# the older per-model names such as deepseek_mtp to it, with a deprecation warning).
MTP_METHOD = "mtp"
# A template that switches thinking on per request ({% if not thinking is defined %}: V3.1).
_THINKING_SWITCH = re.compile(r"\{%-?\s*(?:if|elif|set)\b[^%]*\bthinking\b")


@dataclass(frozen=True)
class Profile:
    name: str
    family: str
    architectures: tuple[str, ...]  # config.json architectures it serves
    model_types: tuple[str, ...]  # config.json model_type, when architectures is missing
    reasoning_parser: str | None
    tool_call_parser: str | None
    mtp: bool  # MTP speculative decoding on GPUs, when the checkpoint has MTP layers

    def fits(self, ck: Checkpoint) -> bool:
        if ck.architectures:
            return ck.architecture in self.architectures
        return ck.model_type in self.model_types


_V3 = ("DeepseekV3ForCausalLM",)
PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("deepseek-v2", "DeepSeek-V2 (V2, V2-Lite)", ("DeepseekV2ForCausalLM",), ("deepseek_v2",),
            None, None, False),
    Profile("deepseek-v3", "DeepSeek-V3", _V3, ("deepseek_v3",), None, "deepseek_v3", True),
    Profile("deepseek-r1", "DeepSeek-R1", _V3, ("deepseek_v3",), "deepseek_r1", "deepseek_v3", True),
    Profile("deepseek-v3.1", "DeepSeek-V3.1", _V3, ("deepseek_v3",), "deepseek_v3", "deepseek_v31", True),
    # V3/R1's tool-call format with V3.1's per-request thinking switch (the project's own checkpoint)
    Profile("deepseek-v3-switch", "DeepSeek-V3 tool calls, thinking switched per request", _V3, ("deepseek_v3",),
            "deepseek_v3", "deepseek_v3", True),
    Profile("deepseek-v3.2", "DeepSeek-V3.2", ("DeepseekV32ForCausalLM",), ("deepseek_v32",),
            "deepseek_v3", "deepseek_v32", True),
)}
CHOICES = (AUTO, NONE, *PROFILES)


class ServingSettings(Protocol):
    """A model's serving settings (installer/inventory/served.py Model)."""

    @property
    def path(self) -> Path: ...
    @property
    def profile(self) -> str: ...
    @property
    def reasoning_parser(self) -> str | None: ...
    @property
    def tool_call_parser(self) -> str | None: ...
    @property
    def mtp_tokens(self) -> int | None: ...


@dataclass(frozen=True)
class Flag:
    argv: tuple[str, ...]
    cause: str  # the setting or checkpoint field that made it


@dataclass(frozen=True)
class EnvSetting:
    name: str
    value: str
    cause: str


# fp8 block-quantized weights on a GPU: vLLM 0.26 runs their GEMMs with DeepGEMM, whose kernels
# it JIT-compiles (nvcc) for every token count up to max_num_batched_tokens before it serves, and
# FlashInfer's SM90 block-scale GEMM it builds during CUDA graph capture: most of a cold engine
# start. With VLLM_USE_DEEP_GEMM=0 vLLM uses its own compiled kernels instead, which served the
# project's checkpoint as fast (the H100 figures: docs/deepseek.md "The second run").
# `engine.env: {VLLM_USE_DEEP_GEMM: "1"}` brings DeepGEMM back, its warm-up paid once per host.
NO_DEEP_GEMM = ("VLLM_USE_DEEP_GEMM", "0")


def _block_fp8(ck: Checkpoint) -> bool:
    q = ck.quantization
    return q.get("quant_method") == "fp8" and bool(q.get("weight_block_size"))


@dataclass(frozen=True)
class Resolved:
    """A model's profile and the flags it adds to its engines."""

    profile: str  # a profile's name, or "none"
    why: str
    flags: tuple[Flag, ...] = ()
    notes: tuple[str, ...] = ()  # what the profile would add and does not, and why
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    mtp_tokens: int = 0
    env: tuple[EnvSetting, ...] = ()  # under the engine's own engine.env, which wins

    @property
    def argv(self) -> list[str]:
        return [a for f in self.flags for a in f.argv]


def choose(ck: Checkpoint) -> tuple[Profile | None, str]:
    """The profile `auto` picks for a checkpoint, and what in it decided."""
    arch = f"config.json {ck.describe_architecture()}"
    fitting = [p for p in PROFILES.values() if p.fits(ck)]
    if not fitting:
        return None, f"{arch}: not a family a profile covers"
    if len(fitting) == 1:
        return fitting[0], arch
    # V3, R1 and V3.1 share an architecture: their chat templates tell them apart. A template that
    # switches thinking per request (off unless asked) needs the deepseek_v3 reasoning parser, which
    # follows the switch: deepseek_r1's reads everything before a `</think>` as reasoning, so with
    # thinking off the answer (and a forced tool call, which structured output only starts once
    # reasoning ended) would never leave it. V3.1 writes a tool call as name<sep>arguments, V3 and
    # R1 fence the arguments in ```json (the project's own checkpoint: the fence and the switch).
    # Without a switch, R1 opens <think>.
    where = f"the chat template ({ck.template_file})" if ck.template else "no chat template"
    if _THINKING_SWITCH.search(ck.template):
        if checkpoint.FENCED_ARGUMENTS not in ck.template:
            return PROFILES["deepseek-v3.1"], (f"{arch}; {where} switches thinking per request and writes "
                                               "tool-call arguments unfenced")
        return PROFILES["deepseek-v3-switch"], (f"{arch}; {where} switches thinking per request and fences "
                                                "tool-call arguments in ```json")
    if checkpoint.THINK in ck.template:
        return PROFILES["deepseek-r1"], f"{arch}; {where} opens {checkpoint.THINK}"
    return PROFILES["deepseek-v3"], f"{arch}; {where} has no {checkpoint.THINK}"


def _where(key: str) -> str:
    return f"model.{key}"


def resolve(
    model: ServingSettings, device: str, task: str = "generate", where: Callable[[str], str] = _where,
    ck: Checkpoint | None = None,
) -> Resolved:
    """The profile of `model` on `device` ("cpu" or "gpu") and the flags it writes; `where(key)`
    names a setting of the model for the causes (its file:line). Wrong settings are the checks'
    (installer/inventory/profile_checks.py), which `validate` runs first: here they add nothing."""
    if task != "generate":
        return Resolved(NONE, f"task {task}: profiles are for generate models")
    explicit = model.profile not in (AUTO, NONE)
    needs_checkpoint = model.profile != NONE or bool(model.mtp_tokens)
    ck = ck or (checkpoint.read(model.path) if needs_checkpoint else Checkpoint(model.path))
    if model.profile == NONE:
        profile, why = None, f"{where('profile')} none"
    elif explicit:
        profile, why = PROFILES[model.profile], where("profile")
    elif ck.error:
        profile, why = None, f"auto: {ck.error}"
    else:
        profile, found = choose(ck)
        why = f"auto: {found}"
    flags: list[Flag] = []
    notes: list[str] = []
    named = profile.name if profile else NONE
    reasoning = _parser(model.reasoning_parser, profile.reasoning_parser if profile else None)
    if reasoning:
        cause = where("reasoning_parser") if model.reasoning_parser else f"profile {named}"
        flags.append(Flag(("--reasoning-parser", reasoning), cause))
    tools = _parser(model.tool_call_parser, profile.tool_call_parser if profile else None)
    unmarked = bool(ck.template) and checkpoint.TOOL_CALLS not in ck.template
    if tools and unmarked and model.profile == AUTO and model.tool_call_parser is None:
        # auto: a template that never writes tool calls gets no parser for them
        notes.append(f"no tool-call parser: the chat template ({ck.template_file}) has no {checkpoint.TOOL_CALLS}")
        tools = None
    if tools:
        cause = where("tool_call_parser") if model.tool_call_parser else f"profile {named}" + (
            f" (the chat template has {checkpoint.TOOL_CALLS})" if checkpoint.TOOL_CALLS in ck.template else "")
        flags.append(Flag(("--tool-call-parser", tools, "--enable-auto-tool-choice"), cause))
    tokens, mtp_cause = _mtp(model, profile, ck, device, where, notes)
    if tokens:
        spec = json.dumps({"method": MTP_METHOD, "num_speculative_tokens": tokens}, separators=(",", ":"))
        flags.append(Flag(("--speculative-config", spec), mtp_cause))
    env: list[EnvSetting] = []
    if device == "gpu" and _block_fp8(ck):
        env.append(EnvSetting(*NO_DEEP_GEMM, "config.json quantization_config: fp8 with weight_block_size "
                              "(no DeepGEMM JIT warm-up at the engine's first start)"))
    return Resolved(named, why, tuple(flags), tuple(notes), reasoning, tools, tokens, tuple(env))


def _parser(override: str | None, from_profile: str | None) -> str | None:
    """The override (`none`: no parser), else the profile's."""
    if override is not None:
        return None if override == NONE else override
    return from_profile


def _mtp(
    model: ServingSettings, profile: Profile | None, ck: Checkpoint, device: str,
    where: Callable[[str], str], notes: list[str],
) -> tuple[int, str]:
    """(num_speculative_tokens, what set it); 0: MTP off (a note says why, where it matters)."""
    asked = model.mtp_tokens
    from_profile = profile is not None and profile.mtp
    if asked is None and not from_profile:
        return 0, ""
    if asked == 0:
        if from_profile and ck.mtp_layers:
            notes.append(f"MTP off: {where('mtp_tokens')} 0")
        return 0, ""
    if not ck.mtp_layers:
        if asked is None:
            notes.append("MTP off: config.json has no num_nextn_predict_layers")
        return 0, ""  # asked for: the checks refuse it
    if device != "gpu":
        notes.append("MTP off: vLLM's MTP speculative decoding is for GPU engines (engine.device cpu)")
        return 0, ""
    layers = f"config.json num_nextn_predict_layers {ck.mtp_layers}"
    if asked is not None:
        return asked, f"{where('mtp_tokens')} {asked} ({layers})"
    named = profile.name if profile else NONE
    return ck.mtp_layers, f"{layers} (profile {named}; mtp_tokens unset: one token per MTP layer)"

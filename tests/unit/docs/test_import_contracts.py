"""The import contracts of pyproject.toml ([tool.importlinter]) hold: imports run one way (CLI ->
flows -> mechanisms -> model -> plumbing), no circles, no CLI command module imports another,
the gateway stays apart from the installer, and no module imports a test module or a conftest."""

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from tests.support import REPO
from tests.support.import_contracts import AcyclicModules, ForbiddenNames

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_hold() -> None:
    assert LINT_IMPORTS.is_file(), f"{LINT_IMPORTS} is missing: pip install -e '.[dev]' installs import-linter"
    # --no-cache: nothing written into the checkout.
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout, proc.stdout


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        for module in (importer, imported):
            graph.add_module(module)
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import x")
    return graph


def test_acyclic_modules_finds_a_package_and_its_submodule_importing_each_other() -> None:
    """The circle acyclic_siblings misses: installer.cli wired its commands, which imported its app."""
    contract = AcyclicModules("cycles", {}, {"packages": ["pkg"]})
    broken = contract.check(_graph(("pkg.cli", "pkg.cli.bench"), ("pkg.cli.bench", "pkg.cli")), verbose=False)
    assert not broken.kept
    assert broken.metadata["cycles"] == [("pkg.cli", "pkg.cli.bench", "pkg.cli")]
    kept = contract.check(_graph(("pkg.cli", "pkg.cli.bench"), ("pkg.cli.bench", "pkg.cli.root")), verbose=False)
    assert kept.kept


def test_forbidden_names_finds_test_modules_and_conftests_imported() -> None:
    contract = ForbiddenNames("tests", {}, {"packages": ["tests"], "names": ["test_*", "conftest"]})
    graph = _graph(
        ("tests.unit.test_push", "tests.unit.test_sign"),
        ("tests.e2e.test_up", "tests.e2e.conftest"),
        ("tests.e2e.test_tls", "tests.e2e.load"),
        ("tests.unit.test_sign", "tests.support.bundles"),
    )
    check = contract.check(graph, verbose=False)
    assert not check.kept
    assert check.metadata["found"] == [
        "tests.e2e.test_up -> tests.e2e.conftest (l. 1)",
        "tests.unit.test_push -> tests.unit.test_sign (l. 1)",
    ]


def test_no_contract_ignores_an_import_between_installer_modules() -> None:
    """The flows share what they share from below (upgrade reuses prepare(), not deploy's copy),
    so no contract lets one installer module import another against the direction."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    ignored = [
        imp
        for contract in config["tool"]["importlinter"]["contracts"]
        for imp in contract.get("ignore_imports", [])
    ]
    inside = [imp for imp in ignored if all(side.strip().startswith("installer") for side in imp.split("->"))]
    assert inside == [], f"ignored imports between installer modules: {inside}"


def _layers_contract() -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    return contract


def test_every_module_of_a_split_package_has_a_layer() -> None:
    """exhaustive_ignores lets gpu/, converged/ and weights/ sit in several layers; `exhaustive`
    then no longer sees their modules, so a new one (gpu/multihost.py was) would escape every
    layer. Each must be named."""
    contract = _layers_contract()
    named = {m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")}
    unplaced = [
        f"{package}.{path.stem}"
        for package in contract["exhaustive_ignores"]
        for path in sorted((REPO / "installer" / package).glob("*.py"))
        if path.stem != "__init__" and f"{package}.{path.stem}" not in named
    ]
    assert unplaced == [], f"modules in no layer of pyproject.toml's layers contract: {unplaced}"


def test_the_mechanisms_do_not_import_each_other_freely() -> None:
    """Below the flows, packages are ordered (a line per step) or kept apart (`|`); only the
    flows and the layers under the mechanisms share a line with `:` (free imports)."""
    layers = _layers_contract()["layers"]
    start = layers.index("converged.fast_path | state")
    end = next(i for i, layer in enumerate(layers) if layer.startswith("inventory"))
    assert end - start > 1
    assert [layer for layer in layers[start:end] if ":" in layer] == []

"""The control machine's install (`pip install private-llm-installer`, no extras: the GPU proof's
control venv) imports every module the installer imports at module level. On 2026-12-06 the
H100 proof's control venv failed at `installer --help`: installer/release/metrics.py imported
prometheus_client, which only the gateway extra named."""

import ast
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement

from tests.support import REPO

# Imported by code that runs on the hosts (the GPU doctor, with the host's torch), not on the
# control machine, and only inside functions; or part of another distribution's install.
HOST_SIDE = {"torch"}


def _closure(names: list[str]) -> set[str]:
    """The distributions `names` install, with their own dependencies (no extras)."""
    seen: set[str] = set()
    todo = [Requirement(n).name for n in names]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _module_level_imports(path) -> set[str]:  # type: ignore[no-untyped-def]
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:  # module level only: a function's import runs where it is called
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_base_dependencies_cover_every_module_level_import_of_the_installer() -> None:
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    installed = _closure(base)
    owners = metadata.packages_distributions()
    ours = {"installer", "service", "benchmarks", "tests"}
    missing = {}
    for path in sorted((REPO / "installer").rglob("*.py")):
        for top in _module_level_imports(path) - ours - HOST_SIDE - set(sys.stdlib_module_names):
            dists = {d.lower().replace("_", "-") for d in owners.get(top, [])}
            if not dists & installed:
                missing.setdefault(top, []).append(path.relative_to(REPO).as_posix())
    assert missing == {}, f"add their distributions to [project] dependencies: {missing}"

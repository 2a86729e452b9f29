"""Two import contracts import-linter does not ship, checked by `lint-imports` with the built-in
ones (pyproject.toml, [tool.importlinter]; tests/unit/docs/test_import_contracts.py runs it):

- acyclic_modules: no module imports one that imports it back, by any chain. The built-in
  acyclic_siblings compares siblings only, so it misses a package and its own submodule
  importing each other, as the CLI's app and its command modules once did.
- forbidden_names: no module of `packages` imports a module whose own name matches one of
  `names` (shell patterns such as test_* and conftest), which module expressions cannot say.
"""

from fnmatch import fnmatch

import grimp
from importlinter import Contract, ContractCheck, fields, output


def _within(module: str, packages: list[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


class AcyclicModules(Contract):
    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        packages: list[str] = self.packages  # type: ignore[assignment]
        cycles: dict[frozenset[str], tuple[str, ...]] = {}
        for importer in sorted(m for m in graph.modules if _within(m, packages)):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                back = graph.find_shortest_chain(importer=imported, imported=importer)
                if back is not None:
                    cycles.setdefault(frozenset(back), (importer, *back))
        return ContractCheck(kept=not cycles, metadata={"cycles": sorted(cycles.values())})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(" -> ".join(cycle), bold=False)
        output.new_line()


class ForbiddenNames(Contract):
    type_name = "forbidden_names"

    packages = fields.ListField(subfield=fields.StringField())
    names = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        packages: list[str] = self.packages  # type: ignore[assignment]
        names: list[str] = self.names  # type: ignore[assignment]
        found = []
        for importer in sorted(m for m in graph.modules if _within(m, packages)):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if any(fnmatch(imported.rpartition(".")[2], name) for name in names):
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = ", ".join(str(d["line_number"]) for d in details)
                    found.append(f"{importer} -> {imported} (l. {lines})")
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(line, bold=False)
        output.new_line()

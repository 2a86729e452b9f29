"""Role conventions (docs/architecture.md, "The roles"), checked on every role: documented
options, FQCN modules, changed_when on commands, prefixed variables."""

from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).parents[3] / "playbooks" / "roles").iterdir() if p.is_dir())


def _load(path: Path) -> object:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _tasks(role: Path) -> list[dict]:
    found: list[dict] = []

    def walk(items: list[dict] | None) -> None:
        for item in items or []:
            found.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    for f in sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml")):
        walk(_load(f))  # type: ignore[arg-type]
    return found


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml") or {}
    spec = _load(role / "meta" / "argument_specs.yml")
    assert spec, f"{role.name} has no meta/argument_specs.yml"
    options = spec["argument_specs"]["main"]["options"]
    assert set(defaults) <= set(options), f"undocumented defaults: {set(defaults) - set(options)}"
    for name, opt in options.items():
        assert "type" in opt and "description" in opt, f"{role.name}.{name}: needs a type and a description"
        if name not in defaults:
            assert opt.get("required"), f"{role.name}.{name}: no default and not required"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_variables_carry_the_role_name(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml") or {}
    for name in defaults:
        assert name.startswith(f"{role.name}_"), f"{role.name}: {name} should start with {role.name}_"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_modules_are_fqcn_and_commands_say_when_they_change(role: Path) -> None:
    meta_keys = {"name", "when", "loop", "loop_control", "register", "notify", "tags", "block",
                 "rescue", "always", "changed_when", "failed_when", "check_mode", "until",
                 "retries", "delay", "no_log", "become", "listen", "vars", "ignore_errors",
                 "environment"}
    for task in _tasks(role):
        modules = [k for k in task if k not in meta_keys]
        if "block" in task:
            continue
        assert len(modules) == 1, f"{role.name}: task {task.get('name')!r} has modules {modules}"
        module = modules[0]
        assert module.startswith("ansible.builtin."), f"{role.name}: {module} is not ansible.builtin.*"
        assert task.get("name"), f"{role.name}: a {module} task has no name"
        if module in ("ansible.builtin.command", "ansible.builtin.shell"):
            args = task[module]
            has_creates = isinstance(args, dict) and "creates" in args
            assert "changed_when" in task or has_creates, f"{role.name}: {task['name']!r} lacks changed_when"

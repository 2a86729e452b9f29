"""Where the state lives: one resolver (installer.base.paths), set by the CLI from --state-dir or the
command's inventory, so every command given the same inventory finds the same state from any
working directory."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from installer.base import paths
from installer.bundle import sign
from installer.cli import _register, app
from installer.cli.root import _anchor, _anchor_inventory_options
from installer.secrets import keys

runner = CliRunner()
_register()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An inventory in site/, the command run from another folder, no INSTALLER_STATE_DIR."""
    monkeypatch.delenv("INSTALLER_STATE_DIR", raising=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "site.yml").write_text("deployment: d\n")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    yield tmp_path
    paths.use_state_dir(None)  # the resolver is process-wide: leave none of this test's choice


def test_precedence_flag_then_environment_then_inventory_then_working_directory(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = elsewhere / "site" / "site.yml"
    paths.use_state_dir(None)
    assert paths.resolve_state_dir() == (elsewhere / "cwd" / ".installer", "the working directory")
    paths.anchor_state_to(Path("../site/site.yml"))  # relative to the working directory
    assert paths.resolve_state_dir() == (elsewhere / "site" / ".installer", "the folder of site.yml")
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(elsewhere / "env"))
    assert paths.resolve_state_dir() == (elsewhere / "env", "INSTALLER_STATE_DIR")
    paths.use_state_dir(elsewhere / "flag")
    paths.anchor_state_to(inventory)
    assert paths.resolve_state_dir() == (elsewhere / "flag", "--state-dir")
    paths.use_state_dir(None)  # the next command starts afresh: no inventory, no flag
    monkeypatch.delenv("INSTALLER_STATE_DIR")
    assert paths.state_dir() == elsewhere / "cwd" / ".installer"


def test_the_state_dir_is_created_private(elsewhere: Path) -> None:
    paths.anchor_state_to(elsewhere / "site" / "site.yml")
    made = paths.state_dir()
    assert made == elsewhere / "site" / ".installer" and made.stat().st_mode & 0o777 == 0o700


def test_every_inventory_option_anchors_the_state_except_the_labs() -> None:
    root = typer.main.get_command(app)
    ctx = root.make_context("installer", ["keys", "list"], resilient_parsing=True)
    _anchor_inventory_options(root, ctx)
    found = {}

    def walk(group: Any, prefix: str) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if hasattr(command, "list_commands"):
                walk(command, f"{prefix}{name} ")
            for param in getattr(command, "params", []):
                if param.name == "inventory":
                    found[f"{prefix}{name}"] = param.callback is _anchor

    walk(root, "")
    assert found.pop("lab up") is False  # the file `lab up` writes, not a deployment's
    assert found and all(found.values()), found
    assert {
        "up",
        "plan",
        "down",
        "upgrade",
        "rollback",
        "releases",
        "status",
        "ca export",
        "doctor",
        "keys create",
        "keys list",
        "keys revoke",
        "bundle build",
        "bundle keygen",
    } <= set(found)


class _Seen(Exception):
    pass


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Each command stops at its first touch of the inventory or the state, noting the state dir."""
    seen: list[Path] = []

    def record(*_a: Any, **_k: Any) -> Any:
        seen.append(paths.resolve_state_dir()[0])
        raise _Seen

    from installer.cli import bundle, day2, deploy, gpu, root, status, terraform, tls

    for module in (bundle, day2, deploy, gpu, root, status, terraform, tls):
        monkeypatch.setattr(module, "load_inventory", record)
    monkeypatch.setattr("installer.inventory.load_inventory", record)
    monkeypatch.setattr(keys, "load", record)
    monkeypatch.setattr(sign, "keygen", record)
    return seen


COMMANDS = [
    ["up"],
    ["up", "--check"],
    ["plan"],
    ["down"],
    ["upgrade"],
    ["rollback"],
    ["releases"],
    ["status"],
    ["ca", "export"],
    ["doctor"],
    ["bundle", "build", "-o", "b.tar"],
    ["bundle", "keygen"],
    ["keys", "create", "--name", "me"],
    ["keys", "list"],
    ["keys", "revoke", "me"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_finds_the_state_next_to_its_inventory(
    elsewhere: Path, recorded: list[Path], command: list[str]
) -> None:
    result = runner.invoke(app, [*command, "-i", "../site/site.yml"])
    assert isinstance(result.exception, _Seen), result.output
    assert recorded == [elsewhere / "site" / ".installer"]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_state_dir_flag_beats_the_inventory(elsewhere: Path, recorded: list[Path], command: list[str]) -> None:
    result = runner.invoke(app, ["--state-dir", "../flag", *command, "-i", "../site/site.yml"])
    assert isinstance(result.exception, _Seen), result.output
    assert recorded == [elsewhere / "flag"]


def test_a_key_made_for_an_inventory_is_listed_for_it_from_anywhere(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: `keys create --inventory inventory/lab.yml` then `up --inventory inventory/lab.yml`."""
    from installer.flows import keys_push

    # No hosts to judge or send to (tests/unit/day2/test_keys_push_revisions.py covers those).
    monkeypatch.setattr(keys_push, "check", lambda inv, **_k: keys_push.Checked(inv, []))
    monkeypatch.setattr("installer.inventory.load_inventory", lambda path: None)
    made = runner.invoke(app, ["keys", "create", "--name", "me", "-i", "../site/site.yml"])
    assert made.exit_code == 0, made.output
    assert keys.load(elsewhere / "site" / ".installer" / "keys.json").keys[0].name == "me"
    assert not (elsewhere / "cwd" / ".installer").exists()
    listed = runner.invoke(app, ["keys", "list", "-i", str(elsewhere / "site" / "site.yml")])
    assert listed.exit_code == 0 and "│ me " in listed.output, listed.output
    assert "│ me " not in runner.invoke(app, ["keys", "list"]).output  # ./.installer is another state


def test_a_missing_inventory_is_refused_before_anything_is_written(elsewhere: Path) -> None:
    result = runner.invoke(app, ["keys", "create", "--name", "me", "-i", "../nowhere/site.yml"])
    assert result.exit_code == 2 and "is not a file" in result.output
    assert not (elsewhere / "nowhere").exists() and not (elsewhere / "cwd" / ".installer").exists()


def test_a_state_folder_that_cannot_be_made_is_one_clear_error(elsewhere: Path) -> None:
    from installer.base.errors import InstallerError
    from installer.base.runlog import RunLog

    (elsewhere / "a-file").write_text("")
    paths.use_state_dir(elsewhere / "a-file" / "state")
    with pytest.raises(InstallerError, match="chosen by --state-dir") as err:
        RunLog("up", "d")
    assert err.value.details == ["pass `installer --state-dir DIR ...` with a folder you may write to"]

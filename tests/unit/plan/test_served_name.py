"""model.served_name is what clients send as `model`, vLLM's org/name form included; on the hosts
the weights live in one folder made from it (Model.dir_name): never a path, one folder per name."""

import itertools
import json
import re
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

from installer.ansible import render
from installer.base import paths
from installer.bundle.manifest import Manifest
from installer.inventory import Inventory, load_inventory
from installer.inventory.served import check_served_name, model_dir_name
from installer.planning import plan as deployment_plan
from installer.state import revisions

REPO = Path(__file__).parents[3]
ONE_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _inventory_data(model: Path, name: str) -> dict:
    return {"deployment": "demo", "model": {"path": str(model), "served_name": name},
            "hosts": [{"name": "h1", "address": "10.0.0.1"}], "engine": {"device": "cpu"}}


@pytest.mark.parametrize("name, folder", [
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen--Qwen2.5-7B-Instruct"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai--DeepSeek-R1"),
    ("deepseek-r1-7b", "deepseek-r1-7b"),  # names of before keep their folder
    ("org/team/model_v1.5", "org--team--model_v1.5"),
])
def test_org_names_are_served_and_get_one_folder(name: str, folder: str, tmp_path: Path) -> None:
    inv = Inventory.model_validate(_inventory_data(tmp_path, name))
    assert inv.model.served_name == name and inv.model.dir_name == folder


@pytest.mark.parametrize("name, why", [
    ("a/../../etc/cron.d", "'/'-separated parts"),
    ("../x", "'/'-separated parts"),
    ("/etc/cron.d", "'/'-separated parts"),
    ("Qwen/", "'/'-separated parts"),
    ("Qwen//7B", "'/'-separated parts"),
    ("Qwen/./7B", "'/'-separated parts"),
    ("Qwen/.hidden", "'/'-separated parts"),
    ("Qwen/-7B", "'/'-separated parts"),
    ("a..b", "'/'-separated parts"),
    ("Qwen\\7B", "'/'-separated parts"),
    ("Qwen 7B", "'/'-separated parts"),
    ("Qwen--7B", "'--' is reserved"),
    ("Qwen/Qwen--7B", "'--' is reserved"),
    ("o/" + "m" * 127, "129 characters, at most 128"),
])
def test_names_that_are_paths_or_ambiguous_are_refused(name: str, why: str) -> None:
    with pytest.raises(ValueError, match="is not a model name") as err:
        check_served_name(name)
    assert why in str(err.value)


def test_128_characters_fit() -> None:
    name = "o/" + "m" * 126
    assert check_served_name(name) == name


def test_every_accepted_name_gets_its_own_safe_folder() -> None:
    # Every string up to 7 characters over the characters that matter to the mapping.
    accepted = [
        name for n in range(1, 8) for chars in itertools.product("a-/.", repeat=n)
        if _accepted(name := "".join(chars))
    ]
    assert {"a/a", "a-/a", "a/a-", "a-a/a", "a/a/a", "a.a/a"} <= set(accepted)
    folders = {model_dir_name(name): name for name in accepted}
    assert len(folders) == len(accepted), "two served names share a folder"
    for folder in folders:
        assert ONE_FOLDER.fullmatch(folder) and ".." not in folder, folder


def _accepted(name: str) -> bool:
    try:
        check_served_name(name)
    except ValueError:
        return False
    return True


def test_the_roles_get_the_full_name_and_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    inv = Inventory.model_validate(_inventory_data(tmp_path, "Qwen/Qwen2.5-7B-Instruct"))
    gv = render.group_vars(deployment_plan.build(inv), Manifest({}, {}, []))
    assert gv["model_dir_name"] == gv["engine_model_dir_name"] == "Qwen--Qwen2.5-7B-Instruct"
    # The API keeps the full name: vLLM serves it, the gateway routes it, the health check asks for it.
    assert gv["model_served_name"] == gv["engine_served_model_name"] == gv["healthcheck_model"]
    assert {e["model"] for e in gv["gateway_engines"]} == {"Qwen/Qwen2.5-7B-Instruct"}
    assert gv["healthcheck_model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_model_role_copies_the_weights_into_the_one_folder(tmp_path: Path) -> None:
    """The model role for real (connection local): the weights land in models/<dir_name>/,
    not in a nested Qwen/ folder, and their checksums verify there."""
    bundle, state = tmp_path / "bundle", tmp_path / "state"
    (bundle / "model").mkdir(parents=True)
    (bundle / "model" / "config.json").write_text("{}")
    # sha256 of "{}" (what the bundle's model.sha256 lists, paths relative to the model folder)
    (bundle / "model.sha256").write_text(
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a  config.json\n"
    )
    (state / "models").mkdir(parents=True)
    inv = Inventory.model_validate(_inventory_data(tmp_path, "Qwen/Qwen2.5-7B-Instruct"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False, "roles": ["model"],
        # the engine role listens for this in a real run
        "handlers": [{"name": "Engine restart", "listen": "private-llm model changed",
                      "ansible.builtin.debug": {"msg": "restart"}}],
    }]))
    r = ansible_runner.run(
        private_data_dir=str(tmp_path), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={"pli_state_dir": str(state), "pli_bundle_dir": str(bundle),
                   "model_served_name": inv.model.served_name, "model_dir_name": inv.model.dir_name,
                   "models": [{"name": "main", "served_name": inv.model.served_name,
                               "dir_name": inv.model.dir_name, "task": "generate", "hosts": ["localhost"]}],
                   "ansible_python_interpreter": sys.executable},
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "True",
                 "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        quiet=True, suppress_env_files=True,
    )
    assert r.rc == 0, r.stdout.read()[-3000:]
    assert sorted(p.name for p in (state / "models").iterdir()) == [".installed.json", "Qwen--Qwen2.5-7B-Instruct"]
    assert (state / "models" / "Qwen--Qwen2.5-7B-Instruct" / "config.json").read_text() == "{}"


def test_a_revision_snapshot_with_an_org_name_loads_for_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots written before served_name was tightened may hold 'org/name': rollback reads
    them with today's model, and their own playbooks build the folder from the served name."""
    monkeypatch.delenv("INSTALLER_STATE_DIR", raising=False)
    paths.use_state_dir(tmp_path / "state")
    try:
        (tmp_path / "weights").mkdir()
        (tmp_path / "weights" / "config.json").write_text("{}")
        site = tmp_path / "site.yml"
        site.write_text(yaml.safe_dump(_inventory_data(tmp_path / "weights", "deepseek-ai/DeepSeek-R1")))
        playbooks = tmp_path / "playbooks"
        playbooks.mkdir()
        (playbooks / "site.yml").write_text("---\n")
        rev = revisions.next_revision(load_inventory(site), Manifest({}, {}, []), tmp_path, playbooks)
        snapshot = json.loads((rev.snapshot / "inventory.json").read_text())
        assert snapshot["model"] == {"path": str(tmp_path / "weights"), "served_name": "deepseek-ai/DeepSeek-R1"}
        back = revisions.get("demo", rev.number).inventory()
        assert back.model.served_name == "deepseek-ai/DeepSeek-R1"
        assert back.model.dir_name == "deepseek-ai--DeepSeek-R1"
        # the folder is derived, never stored: the same inventory keeps the same revision digest
        assert "dir_name" not in json.dumps(snapshot)
    finally:
        paths.use_state_dir(None)

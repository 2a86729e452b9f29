"""Which Ansible strategy the installer runs playbooks with: Mitogen's unless the operator says
`linear`, and a mistyped choice is refused with the fix, not run as something else."""

from pathlib import Path

import pytest

from installer.ansible.runner import STRATEGY_ENV, strategy_env
from installer.base.errors import AnsibleError


def test_mitogen_by_default_with_its_plugin_folder() -> None:
    env = strategy_env({})
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()


def test_linear_on_request_without_mitogen() -> None:
    assert strategy_env({STRATEGY_ENV: "linear"}) == {"ANSIBLE_STRATEGY": "linear"}


def test_a_mistyped_strategy_names_the_choices() -> None:
    with pytest.raises(AnsibleError) as exc:
        strategy_env({STRATEGY_ENV: "mitogen_free"})
    assert STRATEGY_ENV in str(exc.value) and "mitogen, linear" in exc.value.details[0]

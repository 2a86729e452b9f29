"""`installer plan` and `installer down` decisions, with the Terraform steps stubbed out."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.cli import terraform as tf_cli
from installer.terraform import provision
from installer.terraform.cli import ChangeSummary, ResourceChange
from tests.support.terraform_helpers import cloud_inventory

runner = CliRunner()
_register()


class _Outputs:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self._outputs = outputs

    def outputs(self) -> dict[str, Any]:
        return self._outputs


class _Workspace:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self.tf = _Outputs(outputs)


@pytest.fixture()
def stubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    calls: dict[str, Any] = {"applied": False, "checked": False}
    summary = ChangeSummary(
        remove=3, changes=[ResourceChange("module.hosts.aws_instance.this[0]", "delete")]
    )

    def plan(_ws: object, destroy: bool = False) -> tuple[ChangeSummary, Path]:
        plan_file = tmp_path / "x.tfplan"
        plan_file.write_text("plan")
        return (
            summary
            if destroy
            else ChangeSummary(
                add=9, changes=[ResourceChange("module.hosts.aws_instance.this[0]", "create")]
            )
        ), plan_file

    def apply(_ws: object, _plan: Path, _note: object) -> ChangeSummary:
        calls["applied"] = True
        return summary

    monkeypatch.setattr(provision, "prepare", lambda *_a, **_k: _Workspace({}))
    monkeypatch.setattr(provision, "plan", plan)
    monkeypatch.setattr(provision, "apply", apply)
    monkeypatch.setattr(tf_cli, "run_up", lambda **kw: _checked(calls, kw))
    calls["site"] = tmp_path / "aws.yml"
    cloud_inventory("aws", tmp_path)
    return calls


def _baremetal(tmp_path: Path) -> Path:
    site = tmp_path / "bm.yml"
    site.write_text(
        "deployment: d\nmodel: {path: weights, served_name: m}\n"
        "hosts: [{name: a, address: 10.1.1.1}]\n"
    )
    return site


def test_down_asks_and_keeps_everything_on_no(stubbed: dict[str, Any]) -> None:
    result = runner.invoke(app, ["down", "-i", str(stubbed["site"])], input="n\n")
    assert result.exit_code == 1
    assert "Destroy these 3 resource(s) of deployment gpu-demo?" in result.output
    assert "nothing was destroyed" in result.output and not stubbed["applied"]


def test_down_yes_destroys_without_asking(stubbed: dict[str, Any]) -> None:
    result = runner.invoke(app, ["down", "-i", str(stubbed["site"]), "--yes"])
    assert result.exit_code == 0, result.output
    assert "?" not in result.output and stubbed["applied"]
    assert "destroyed: 3 resource(s) of deployment gpu-demo" in result.output


def test_plan_with_new_machines_stops_before_ansible(stubbed: dict[str, Any]) -> None:
    result = runner.invoke(app, ["plan", "-i", str(stubbed["site"])])
    assert result.exit_code == 0, result.output
    assert "terraform: 9 to add, 0 to change, 0 to destroy" in result.output
    assert "1 new machine(s)" in result.output and stubbed["checked"] is False


def test_plan_on_baremetal_is_ansible_check_mode(stubbed: dict[str, Any], tmp_path: Path) -> None:
    site = _baremetal(tmp_path)
    result = runner.invoke(app, ["plan", "-i", str(site)])
    assert result.exit_code == 0, result.output
    assert stubbed["checked"] == {
        "inventory": site, "bundle": None, "trusted_key": [], "insecure": False, "check": True
    }


def test_down_on_baremetal_asks_before_removing_and_never_runs_terraform(
    tmp_path: Path, stubbed: dict[str, Any]
) -> None:
    site = _baremetal(tmp_path)
    result = runner.invoke(app, ["down", "-i", str(site)], input="n\n")
    assert result.exit_code == 1 and not stubbed["applied"]
    assert "Remove private-llm (services, files, user) from 1 host(s)" in result.output
    assert "kept: nothing was removed" in result.output


def _cloud_with_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outputs: dict[str, Any]) -> Path:
    """A cloud deployment whose state holds `outputs` and whose plan only updates a resource."""
    def plan(_ws: object, destroy: bool = False) -> tuple[ChangeSummary, Path]:
        (tmp_path / "x.tfplan").write_text("plan")
        return ChangeSummary(change=1, changes=[ResourceChange("module.hosts.aws_security_group.this", "update")]), (
            tmp_path / "x.tfplan"
        )

    monkeypatch.setattr(provision, "prepare", lambda *_a, **_k: _Workspace(outputs))
    monkeypatch.setattr(provision, "plan", plan)
    cloud_inventory("aws", tmp_path)
    return tmp_path / "aws.yml"


def _checked(seen: dict[str, Any], kw: dict[str, Any]) -> SimpleNamespace:
    """run_up in check mode, stood in for: what it was asked (seen["checked"]), and a result
    without a plan."""
    seen["checked"] = {k: v for k, v in kw.items() if k != "on_result"}
    return SimpleNamespace(deployment_plan=None)


def test_plan_of_existing_cloud_hosts_goes_on_to_check_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = {"name": "gpu-demo-1", "public_address": "54.1.2.3", "private_address": "10.80.1.5",
            "ssh_user": "ubuntu", "gpu_type": None, "gpu_count": None}
    site = _cloud_with_hosts(monkeypatch, tmp_path, {"contract_version": {"value": 1}, "hosts": {"value": [host]}})
    checked: dict[str, Any] = {}
    monkeypatch.setattr(tf_cli, "run_up", lambda **kw: _checked(checked, kw))
    result = runner.invoke(app, ["plan", "-i", str(site)])
    assert result.exit_code == 0, result.output
    assert "terraform: 0 to add, 1 to change, 0 to destroy" in result.output and "new machine" not in result.output
    assert checked["checked"]["check"] is True and checked["checked"]["inventory"] == site
    assert not (tmp_path / "x.tfplan").exists()  # `up` plans again


def test_plan_shows_the_changes_before_a_broken_host_contract_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _cloud_with_hosts(monkeypatch, tmp_path, {"contract_version": {"value": 2}, "hosts": {"value": []}})
    result = runner.invoke(app, ["plan", "-i", str(site)])
    assert "terraform: 0 to add, 1 to change, 0 to destroy" in result.output
    assert "host contract version 2 is not 1" in str(result.exception)

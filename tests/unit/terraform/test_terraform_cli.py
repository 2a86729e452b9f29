"""The typed terraform wrapper: argv with -chdir, the -json event stream folded into summaries."""

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from installer.terraform import mirror
from installer.terraform.cli import Terraform
from installer.terraform.errors import TerraformError

EVENTS: list[dict[str, Any]] = [
    {"type": "version", "terraform": "1.11.4"},
    {
        "type": "planned_change",
        "change": {"resource": {"addr": "module.hosts.aws_vpc.this"}, "action": "create"},
    },
    {
        "type": "planned_change",
        "change": {"resource": {"addr": "module.hosts.aws_instance.this[0]"}, "action": "create"},
    },
    {
        "type": "diagnostic",
        "diagnostic": {"severity": "warning", "summary": "Deprecated", "detail": "use  x"},
    },
    {
        "type": "change_summary",
        "changes": {"add": 2, "change": 0, "remove": 0, "operation": "plan"},
    },
]
FAILURE: list[dict[str, Any]] = [
    {
        "type": "diagnostic",
        "diagnostic": {
            "severity": "error",
            "summary": "Invalid value for variable",
            "detail": "allowed_cidrs opens SSH",
            "range": {"filename": "module/variables.tf", "start": {"line": 150}},
        },
    },
]


def _fake_terraform(tmp_path: Path, events: list[dict[str, Any]], rc: int = 0) -> str:
    """A stand-in binary that prints JSON lines and records its argv."""
    script = tmp_path / "terraform"
    lines = "\n".join(json.dumps(e) for e in events)
    stray = "not json: a provider's stray print"
    body = f"cat <<'JSON'\n{lines}\n{stray}\nJSON\nexit {rc}\n"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\n{body}')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_plan_reads_the_event_stream(tmp_path: Path) -> None:
    tf = Terraform(_fake_terraform(tmp_path, EVENTS), tmp_path / "work", {})
    seen: list[str] = []
    summary = tf.plan(tmp_path / "p.tfplan", on_event=lambda e: seen.append(str(e["type"])))
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:2] == [f"-chdir={tmp_path / 'work'}", "plan"] and "-json" in argv
    assert (summary.add, summary.change, summary.remove) == (2, 0, 0) and summary.has_changes
    assert [c.action for c in summary.changes] == ["create", "create"]
    assert summary.warnings[0].line() == "warning: Deprecated — use x"
    assert seen[0] == "version"


def test_error_diagnostics_become_one_error_with_file_and_line(tmp_path: Path) -> None:
    tf = Terraform(_fake_terraform(tmp_path, FAILURE, rc=1), tmp_path, {})
    with pytest.raises(TerraformError, match="terraform plan failed") as err:
        tf.plan(tmp_path / "p.tfplan", destroy=True)
    assert err.value.details == [
        "module/variables.tf:150: error: Invalid value for variable — allowed_cidrs opens SSH"
    ]
    assert "-destroy" in (tmp_path / "argv").read_text()


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TerraformError, match="terraform not found"):
        Terraform(str(tmp_path / "nope"), tmp_path, {}).version()


def test_cli_config_points_only_at_the_mirror(tmp_path: Path) -> None:
    tools = mirror.TerraformTools("terraform", tmp_path / "plugins")
    env = mirror.cli_env(tmp_path, tools)
    text = Path(env["TF_CLI_CONFIG_FILE"]).read_text()
    assert f'path = "{tmp_path / "plugins"}"' in text and "direct" not in text
    assert env["TF_INPUT"] == "0" and env["CHECKPOINT_DISABLE"] == "1"
    assert "TF_CLI_CONFIG_FILE" not in mirror.cli_env(
        tmp_path, mirror.TerraformTools("terraform", None)
    )


def test_the_tools_a_deployment_used_are_remembered(tmp_path: Path) -> None:
    tools = mirror.TerraformTools(
        "/opt/bundle/terraform/bin/terraform", Path("/opt/bundle/terraform/plugins")
    )
    mirror.remember(tmp_path, tools)
    assert mirror.locate(tmp_path, {}) == tools
    assert mirror.locate(tmp_path, {"INSTALLER_TF_PLUGIN_MIRROR": "/m"}) == mirror.TerraformTools(
        "terraform", Path("/m")
    )

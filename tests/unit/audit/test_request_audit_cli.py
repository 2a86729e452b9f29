"""`installer audit --requests` (#38 item 3): the hosts' trails are collected through the one SSH
fan-out (replaced here by each host's folder as a tar stream), checked on the control machine,
exported as JSON Lines and CSV (0600), and a tail cut off since the last check is named."""

import asyncio
import csv
import io
import json
import stat
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.base import paths
from installer.cli import _register, app
from installer.hosts import remote
from installer.hosts.ssh import Target
from service.request_audit import RequestAudit

runner = CliRunner()
_register()


def _inventory(tmp_path: Path) -> Path:
    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text("{}")
    path = tmp_path / "site.yml"
    path.write_text(
        f"deployment: demo\nmodel: {{path: {model}, served_name: tiny}}\nhosts:\n"
        "  - {name: gw1, address: 10.0.0.1, groups: [serving]}\n"
        "  - {name: gw2, address: 10.0.0.2, groups: [serving]}\n"
    )
    return path


def _trail(folder: Path, tenants: Sequence[str]) -> None:
    audit = RequestAudit(folder, 30)

    async def go() -> None:
        for i, tenant in enumerate(tenants):
            audit.emit(
                {
                    "ts": f"2099-01-01T00:00:0{i}.000+00:00",
                    "subject": f"jwt/u{i}.abc",
                    "tenant": tenant,
                    "model": "tiny",
                    "status": 200,
                    "prompt_tokens": 3,
                    "completion_tokens": 4,
                }
            )
        audit.flush()

    asyncio.run(go())
    audit.close()


def _tar(folder: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(folder.glob("requests-*.jsonl")):
            tar.add(path, arcname=f"./{path.name}")
    return out.getvalue()


@pytest.fixture
def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    folders = {"gw1": tmp_path / "gw1", "gw2": tmp_path / "gw2"}
    _trail(folders["gw1"], ["a", "b", "a"])
    _trail(folders["gw2"], ["b", "b"])
    commands: list[str] = []

    def fake_run(targets: Sequence[Target], command: str, **_: object) -> list[remote.Result]:
        commands.append(command)
        return [remote.Result(t.name, 0, _tar(folders[t.name]), "", 0.1) for t in targets]

    monkeypatch.setattr(remote, "run", fake_run)
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    paths.use_state_dir(None)
    return folders


def test_both_hosts_trails_verify_and_export_one_tenants_records(tmp_path: Path, hosts: dict[str, Path]) -> None:
    out_jsonl, out_csv = tmp_path / "a.jsonl", tmp_path / "a.csv"
    result = runner.invoke(
        app,
        [
            "audit",
            "--requests",
            "-i",
            str(_inventory(tmp_path)),
            "--since",
            "2099-01-01",
            "--tenant",
            "a",
            "--jsonl",
            str(out_jsonl),
            "--csv",
            str(out_csv),
        ],
    )
    assert result.exit_code == 0, result.output
    exported = [json.loads(line) for line in out_jsonl.read_text().splitlines()]
    assert [(r["host"], r["seq"], r["tenant"]) for r in exported] == [("gw1", 1, "a"), ("gw1", 3, "a")]
    table = list(csv.DictReader(out_csv.read_text().splitlines()))
    assert [(r["host"], r["seq"], r["subject"]) for r in table] == [
        ("gw1", "1", "jwt/u0.abc"),
        ("gw1", "3", "jwt/u2.abc"),
    ]
    assert stat.S_IMODE(out_jsonl.stat().st_mode) == 0o600 and stat.S_IMODE(out_csv.stat().st_mode) == 0o600
    heads = json.loads((tmp_path / "state" / "request-audit-heads.json").read_text())
    assert heads["gw1"][0] == 3 and heads["gw2"][0] == 2


def test_an_edit_and_a_tail_cut_since_the_last_check_are_named_by_host(tmp_path: Path, hosts: dict[str, Path]) -> None:
    inventory = str(_inventory(tmp_path))
    assert runner.invoke(app, ["audit", "--requests", "-i", inventory, "--since", "2099-01-01"]).exit_code == 0
    (gw1,) = hosts["gw1"].glob("requests-*.jsonl")
    lines = gw1.read_bytes().splitlines()
    gw1.write_bytes(lines[0].replace(b'"prompt_tokens":3', b'"prompt_tokens":1') + b"\n" + lines[1] + b"\n")
    (gw2,) = hosts["gw2"].glob("requests-*.jsonl")
    gw2.write_bytes(gw2.read_bytes().splitlines()[0] + b"\n")
    result = runner.invoke(app, ["audit", "--requests", "-i", inventory, "--since", "2099-01-01", "--json"])
    assert result.exit_code == 1
    text = result.output + str(result.exception or "")
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    by_host = {h["host"]: h["problems"] for h in report["hosts"]}
    assert by_host["gw1"] == [
        f"{gw1.name}:1: edited: changed after it was written: the next record ({gw1.name}:2) holds another hash for it",
        "-:0: truncated: the chain ends at seq 2, but an earlier check saw it reach seq 3: newer records were removed",
    ]
    assert [p.split(": ")[1] for p in by_host["gw2"]] == ["truncated"]
    assert "broken" in text


def test_refusals_past_a_hosts_daily_cap_are_reported_as_only_counted(tmp_path: Path, hosts: dict[str, Path]) -> None:
    audit = RequestAudit(hosts["gw1"], 30, max_bytes_per_day=100)  # its file is past 100 bytes already

    async def flood() -> None:
        for i in range(5):
            audit.emit({"ts": f"2099-01-01T00:01:0{i}.000+00:00", "subject": "-", "status": 401})
        audit.flush()

    asyncio.run(flood())
    audit.close()
    out_csv = tmp_path / "all.csv"
    inventory = str(_inventory(tmp_path))
    ask = ["audit", "--requests", "-i", inventory, "--since", "today"]
    result = runner.invoke(app, [*ask, "--json", "--csv", str(out_csv)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {h["host"]: h["unrecorded_refusals"] for h in report["hosts"]} == {"gw1": 5, "gw2": 0}
    counted = [r for r in csv.DictReader(out_csv.read_text().splitlines()) if r["event"]]
    assert [(r["host"], r["event"], r["count"], r["seq"]) for r in counted] == [
        ("gw1", "refusals_not_recorded", "5", "4")
    ]
    table = runner.invoke(app, ask)
    assert table.exit_code == 0 and "only counted" in table.output, table.output

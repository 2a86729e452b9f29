"""Token quotas in the key store and the hosts' file, and the control machine's reading of the
recorded usage (installer/flows/usage.py): periods, --since, --by and the sums."""

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from installer.flows import usage
from installer.secrets import keys
from service.auth import KeyRing
from service.keyfile import HostQuota, HostQuotaFile, hash_secret
from service.usage import period_bounds, usage_field
from tests.support import keyfile_before_quotas
from tests.support.loopback import free_port


def test_quotas_go_to_their_own_file_and_keys_json_stays_readable_by_older_gateways(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    keys.create("plain", path=store)
    keys.create("budget", quota_tokens=1000, quota_period="month", path=store)
    keys.create("gone", quota_tokens=5, quota_period="day", path=store)
    keys.revoke("gone", path=store)
    rendered = keys.render_hosts_file(keys.load(store))
    # what a gateway of an earlier release (extra="forbid", no quota fields) validates
    old = keyfile_before_quotas.HostKeyFile.model_validate_json(rendered)
    assert [k.name for k in old.keys] == ["plain", "budget"]
    quotas = json.loads(keys.render_quotas_file(keys.load(store)))
    assert quotas == {"version": 1, "quotas": [{"name": "budget", "tokens": 1000, "period": "month"}]}
    hosts_file = tmp_path / "hosts" / "keys.json"
    hosts_file.parent.mkdir()
    keys.write_hosts_file(hosts_file, keys.load(store))
    assert (hosts_file.parent / "quotas.json").read_text() == keys.render_quotas_file(keys.load(store))
    ring = KeyRing(hosts_file)
    assert ring.with_quota() == ["budget"]
    assert {k.name: (k.quota_tokens, k.quota_period) for k in ring.loaded()} == {
        "plain": (None, None), "budget": (1000, "month")}
    assert ring.digests == {
        "keys_sha256": hashlib.sha256(hosts_file.read_bytes()).hexdigest(),
        "quotas_sha256": hashlib.sha256((hosts_file.parent / "quotas.json").read_bytes()).hexdigest(),
        "roles_sha256": hashlib.sha256((hosts_file.parent / "key_roles.json").read_bytes()).hexdigest(),
    }


def test_a_gateway_without_quotas_json_has_no_quotas(tmp_path: Path) -> None:
    hosts_file = tmp_path / "keys.json"
    hosts_file.write_text(keyfile_before_quotas.HostKeyFile(
        keys=[keyfile_before_quotas.HostKey(name="a", sha256=hash_secret("s"))]).model_dump_json())
    ring = KeyRing(hosts_file)
    assert ring.with_quota() == [] and ring.digests["quotas_sha256"] is None


def test_a_quota_change_alone_is_reloaded(tmp_path: Path) -> None:
    asyncio.run(_quota_change_alone_is_reloaded(tmp_path))


async def _quota_change_alone_is_reloaded(tmp_path: Path) -> None:
    store, hosts_file = tmp_path / "store.json", tmp_path / "keys.json"
    keys.create("team", path=store)
    keys.write_hosts_file(hosts_file, keys.load(store))
    ring = KeyRing(hosts_file)
    keys.set_quota("team", 50, "day", path=store)
    before = hosts_file.read_bytes()
    keys.write_hosts_file(hosts_file, keys.load(store))
    assert hosts_file.read_bytes() == before  # only quotas.json changed
    watcher = asyncio.create_task(ring.watch(interval=0.05))
    try:
        for _ in range(100):
            if ring.with_quota():
                break
            await asyncio.sleep(0.05)
    finally:
        watcher.cancel()
    assert ring.with_quota() == ["team"]


def test_the_quotas_file_refuses_two_quotas_for_one_key() -> None:
    with pytest.raises(ValidationError, match="one quota per key name"):
        HostQuotaFile(quotas=[HostQuota(name="k", tokens=5, period="day"), HostQuota(name="k", tokens=6, period="day")])


def test_set_quota_changes_and_removes_it(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    keys.create("team", path=store)
    assert keys.set_quota("team", 50, "day", path=store).quota_tokens == 50
    assert (keys.load(store).keys[0].quota_tokens, keys.load(store).keys[0].quota_period) == (50, "day")
    keys.set_quota("team", None, None, path=store)
    assert keys.load(store).keys[0].quota_tokens is None
    with pytest.raises(keys.KeyStoreError, match="no active key named 'other'"):
        keys.set_quota("other", 5, "day", path=store)


@pytest.mark.parametrize(("tokens", "period", "why"), [
    (0, "day", "at least 1"),
    (10, None, "go together"),
    (None, "day", "go together"),
    (10, "week", "use day or month"),
])
def test_bad_quotas_are_refused_before_the_store_changes(tmp_path: Path, tokens, period, why) -> None:
    store = tmp_path / "keys.json"
    with pytest.raises(keys.KeyStoreError, match=why):
        keys.create("k", quota_tokens=tokens, quota_period=period, path=store)
    assert not store.exists()


@pytest.mark.parametrize(("period", "now", "period_id", "resets"), [
    ("day", datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), "d2026-12-31", datetime(2027, 1, 1, tzinfo=UTC)),
    ("day", datetime(2026, 3, 1, 0, 0, 0, tzinfo=UTC), "d2026-03-01", datetime(2026, 3, 2, tzinfo=UTC)),
    ("month", datetime(2026, 12, 15, 8, tzinfo=UTC), "m2026-12", datetime(2027, 1, 1, tzinfo=UTC)),
    ("month", datetime(2028, 2, 29, 23, tzinfo=UTC), "m2028-02", datetime(2028, 3, 1, tzinfo=UTC)),
])
def test_quota_periods_are_utc_days_and_calendar_months(period, now, period_id, resets) -> None:
    assert period_bounds(period, now) == (period_id, resets)


def test_since_and_by_are_parsed_or_refused_with_the_fix() -> None:
    today = date(2026, 12, 1)
    assert usage.parse_since("7d", today) == date(2026, 11, 24)
    assert usage.parse_since("today", today) == today
    assert usage.parse_since("2026-11-01", today) == date(2026, 11, 1)
    with pytest.raises(usage.UsageError, match="7d"):
        usage.parse_since("last week", today)
    assert usage.parse_by("model,day") == ("model", "day")
    for wrong in ("key,key", "team", ""):
        with pytest.raises(usage.UsageError, match="key, model, day"):
            usage.parse_by(wrong)


def test_rows_sum_over_what_is_not_grouped() -> None:
    def day(**counts: tuple[int, int, int]) -> dict[str, int]:
        out = {}
        for where, (r, p, c) in counts.items():
            key, model = where.split("__")
            out |= {usage_field("r", key, model.replace("_", "/")): r,
                    usage_field("p", key, model.replace("_", "/")): p,
                    usage_field("c", key, model.replace("_", "/")): c}
        return out

    report = usage.Report("h1", {
        "2026-11-30": day(a__org_m1=(1, 10, 5), b__org_m1=(2, 20, 8)),
        "2026-12-01": day(a__org_m1=(3, 30, 9), a__m2=(1, 7, 1)) | {usage_field("x", "a", "m2"): 1},
    }, [])
    assert usage.rows(report, ("key",)) == [
        {"key": "a", "requests": 5, "prompt_tokens": 47, "completion_tokens": 15, "cut_requests": 1,
         "total_tokens": 62},
        {"key": "b", "requests": 2, "prompt_tokens": 20, "completion_tokens": 8, "cut_requests": 0,
         "total_tokens": 28},
    ]
    by_model_day = usage.rows(report, ("model", "day"))
    assert [(r["model"], r["day"], r["requests"]) for r in by_model_day] == [
        ("m2", "2026-12-01", 1), ("org/m1", "2026-11-30", 3), ("org/m1", "2026-12-01", 3)]


def test_usage_of_a_single_gateway_deployment_is_read_from_its_own_host(tmp_path: Path) -> None:
    """A lone serving host keeps its Redis too: `installer usage` asks it, not refuses."""
    from installer.inventory import load_inventory

    inv = load_inventory(_single_host_site(tmp_path))
    assert usage.require_redis(inv).name == "a"
    with pytest.raises(usage.UsageError, match="no serving host could read the usage") as err:
        usage.fetch(inv, date(2026, 12, 1))
    assert err.value.details[0].startswith("a: ")  # it was asked (over SSH, which nothing answers here)


def test_the_usage_report_runs_isolated_from_a_module_planted_in_the_working_directory(tmp_path: Path) -> None:
    """`installer usage` runs its program as root in the SSH user's home: a service/ package
    there must not shadow the release's."""
    planted = tmp_path / "service"
    planted.mkdir()
    marker = tmp_path / "ran"
    (planted / "__init__.py").write_text("")
    (planted / "usage_report.py").write_text(f"open({str(marker)!r}, 'w').write('planted')\n")
    python = str(Path(sys.executable))
    command = usage.report_command(python, "2026-12-01").replace("cd / && ", "")
    proc = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert not marker.exists()
    assert "-I -m service.usage_report" in command
    # the release's program ran: it looked for the gateway's configuration
    assert "gateway.yml" in proc.stderr, proc.stderr


def _single_host_site(tmp_path: Path) -> Path:
    """One serving host on loopback, at an SSH port nothing listens on: every SSH call fails at once."""
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text(f"deployment: one\nhosts: [{{name: a, address: 127.0.0.1, ssh: {{port: {free_port()}}}}}]\n"
                    "model: {path: weights, served_name: tiny}\nengine: {device: cpu}\n")
    return site


def test_a_quota_is_accepted_for_a_single_serving_host_and_keys_list_still_lists(tmp_path: Path) -> None:
    """Its gateway enforces quotas in its own Redis, so `keys create --quota-tokens -i` is not
    refused; here the host cannot be reached, and only that is reported."""
    from typer.testing import CliRunner

    from installer.cli import _register, app

    _register()
    runner = CliRunner()
    site, state = _single_host_site(tmp_path), tmp_path / "state"
    made = runner.invoke(app, ["--state-dir", str(state), "keys", "create", "--name", "team",
                               "--quota-tokens", "5000", "--quota-period", "day", "-i", str(site)])
    assert "shared Redis" not in made.output + str(made.exception)
    stored = json.loads((state / "keys.json").read_text())
    assert [(k["name"], k["quota_tokens"]) for k in stored["keys"]] == [("team", 5000)]
    listed = runner.invoke(app, ["--state-dir", str(state), "keys", "list", "-i", str(site)])
    assert listed.exit_code == 0, listed.output
    assert "quota use not shown: no serving host could read the usage" in listed.output
    assert "5000/day" in listed.output

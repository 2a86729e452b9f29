"""The fast path's judgement (installer/converged/fast_path.py): which differences send `up` to Ansible,
and how each is named."""

from pathlib import Path

import pytest

from installer.converged import fast_path as converged
from installer.converged.fast_path import Probe
from installer.hosts.ssh import Target

FILE = "sha256=" + "a" * 64 + " mode=0640 owner=0:998"
RECORD = {
    "file:/etc/private-llm/gateway.yml": FILE,
    "file:/opt/private-llm/current": "link -> /opt/private-llm/releases/r-1",
    "unit:private-llm-gateway.service": (
        "ActiveState=active SubState=running UnitFileState=enabled NeedDaemonReload=no "
        "FragmentPath=/etc/systemd/system/private-llm-gateway.service DropInPaths="
    ),
    "tree:/opt/private-llm/releases/r-1": "812 entries, " + "b" * 64,
    "package:redis-server": "5:7.0.15-1~deb12u7 installed",
}


def _with(key: str, value: str | None) -> dict[str, str]:
    found = dict(RECORD)
    if value is None:
        del found[key]
    else:
        found[key] = value
    return found


def test_the_same_host_has_no_drift() -> None:
    assert converged.compare(RECORD, dict(RECORD)) == []


@pytest.mark.parametrize(("key", "value", "said"), [
    ("file:/etc/private-llm/gateway.yml", FILE.replace("a" * 64, "c" * 64),
     "/etc/private-llm/gateway.yml: content changed"),
    ("file:/etc/private-llm/gateway.yml", FILE.replace("0640", "0644"),
     "/etc/private-llm/gateway.yml: mode 0640 -> 0644"),
    ("file:/etc/private-llm/gateway.yml", FILE.replace("0:998", "0:0"),
     "/etc/private-llm/gateway.yml: owner 0:998 -> 0:0"),
    ("file:/etc/private-llm/gateway.yml", None, "/etc/private-llm/gateway.yml: missing (file)"),
    ("file:/opt/private-llm/current", "link -> /opt/private-llm/releases/r-0",
     "/opt/private-llm/current: link -> /opt/private-llm/releases/r-1 became link -> /opt/private-llm/releases/r-0"),
    ("unit:private-llm-gateway.service", RECORD["unit:private-llm-gateway.service"].replace(
        "ActiveState=active SubState=running", "ActiveState=inactive SubState=dead"),
     "private-llm-gateway.service (unit): ActiveState active -> inactive, SubState running -> dead"),
    ("unit:private-llm-gateway.service", RECORD["unit:private-llm-gateway.service"].replace(
        "NeedDaemonReload=no", "NeedDaemonReload=yes"),
     "private-llm-gateway.service (unit): NeedDaemonReload no -> yes"),
    ("tree:/opt/private-llm/releases/r-1", "813 entries, " + "d" * 64,
     "/opt/private-llm/releases/r-1: files changed under it (812 entries then, 813 entries now)"),
    ("package:redis-server", "5:7.0.15-1~deb12u8 installed",
     "redis-server (package): '5:7.0.15-1~deb12u7 installed' became '5:7.0.15-1~deb12u8 installed'"),
])
def test_each_difference_is_named(key: str, value: str | None, said: str) -> None:
    assert converged.compare(RECORD, _with(key, value)) == [said]


def test_a_file_the_record_does_not_know_is_drift() -> None:
    found = {**RECORD, "file:/etc/private-llm/drain.json": FILE}
    assert converged.compare(RECORD, found) == [
        "/etc/private-llm/drain.json: new (file), not there after the last full configure"
    ]


INPUTS = {"bundle": "b1", "release": "r-1", "variables": "v1", "playbooks": "p1", "keys": "k1",
          "probe": "s1", "host variables": "h1", "files the roles copy": "f1"}


def _targets(*names: str) -> list[Target]:
    return [Target(n, f"10.0.0.{i}", "root", 22, None, None) for i, n in enumerate(names, 11)]


def _never(_hosts: list[Target]) -> dict[str, Probe]:
    raise AssertionError("hosts probed although Ansible's inputs already differ")


def test_no_record_means_a_full_configure_without_probing() -> None:
    verdict = converged.judge(_targets("a"), {"a": INPUTS}, {}, _never)
    assert not verdict.fast
    assert verdict.reasons == ["a: no record of a full configure with this state"]


@pytest.mark.parametrize("changed", ["bundle", "keys", "variables", "playbooks", "files the roles copy"])
def test_changed_inputs_mean_a_full_configure_and_name_the_input(changed: str) -> None:
    records = {"a": {"inputs": INPUTS, "entries": RECORD}, "b": {"inputs": INPUTS, "entries": RECORD}}
    now = {"a": INPUTS, "b": {**INPUTS, changed: "other"}}
    verdict = converged.judge(_targets("a", "b"), now, records, _never)
    assert not verdict.fast
    assert verdict.reasons == [f"b: changed since its last full configure: {changed}"]


def test_one_drifted_host_means_a_full_configure_naming_host_and_file() -> None:
    records = {"a": {"inputs": INPUTS, "entries": RECORD}, "b": {"inputs": INPUTS, "entries": RECORD}}
    changed = _with("file:/etc/private-llm/gateway.yml", FILE.replace("a" * 64, "e" * 64))
    verdict = converged.judge(
        _targets("a", "b"), {"a": INPUTS, "b": INPUTS}, records,
        lambda ts: {"a": Probe("a", dict(RECORD)), "b": Probe("b", changed)},
    )
    assert not verdict.fast
    assert verdict.reasons == ["b: /etc/private-llm/gateway.yml: content changed"]


def test_a_host_that_cannot_be_probed_is_not_trusted() -> None:
    records = {"a": {"inputs": INPUTS, "entries": RECORD}}
    verdict = converged.judge(
        _targets("a"), {"a": INPUTS}, records, lambda ts: {"a": Probe("a", error="probe failed (ssh rc 255): x")}
    )
    assert (verdict.fast, verdict.reasons) == (False, ["a: probe failed (ssh rc 255): x"])


def test_matching_hosts_take_the_fast_path() -> None:
    records = {"a": {"inputs": INPUTS, "entries": RECORD}, "b": {"inputs": INPUTS, "entries": RECORD}}
    verdict = converged.judge(
        _targets("a", "b"), {"a": INPUTS, "b": INPUTS}, records,
        lambda ts: {t.name: Probe(t.name, dict(RECORD)) for t in ts},
    )
    assert (verdict.fast, verdict.reasons) == (True, [])


def test_many_differences_are_summed_up(tmp_path: Path) -> None:
    recorded = {f"file:/etc/private-llm/f{i}": FILE for i in range(8)}
    verdict = converged.judge(
        _targets("a"), {"a": INPUTS}, {"a": {"inputs": INPUTS, "entries": recorded}},
        lambda ts: {"a": Probe("a", {})},
    )
    assert len(verdict.reasons) == converged.MAX_REASONS_PER_HOST
    assert verdict.reasons[-1].endswith("(and 3 more)")


def test_full_skips_the_judgement() -> None:
    verdict = converged.verify(_targets("a"), Path("/nonexistent"), None, Path("/x"), "d", full=True)  # type: ignore[arg-type]
    assert (verdict.fast, verdict.reasons) == (False, ["--full: every host configured by Ansible"])


def test_the_probe_reads_its_spec_from_one_argument() -> None:
    # run as root by installer/hosts/remote.py (tests/unit/remote/test_remote.py: the privilege rule)
    assert converged.probe_command({"files": []}) == "python3 - '{\"files\": []}'"


FAILED_ENGINE = (
    "ActiveState=failed SubState=failed UnitFileState=enabled NeedDaemonReload=no "
    "FragmentPath=/etc/systemd/system/private-llm-engine-3.service DropInPaths="
)


@pytest.mark.parametrize(("key", "value"), [
    ("unit:private-llm-engine-3.service", FAILED_ENGINE),
    ("unit:prometheus-alertmanager.service", FAILED_ENGINE.replace("private-llm-engine-3", "x")),
    ("unit:prometheus-node-exporter.service",  # enabled, restarting after a crash
     "ActiveState=activating SubState=auto-restart UnitFileState=enabled NeedDaemonReload=no "
     "FragmentPath=/lib/systemd/system/prometheus-node-exporter.service DropInPaths="),
    ("unit:private-llm-gateway.service",  # ours, stopped and disabled by hand
     "ActiveState=inactive SubState=dead UnitFileState=disabled NeedDaemonReload=no "
     "FragmentPath=/etc/systemd/system/private-llm-gateway.service DropInPaths="),
])
def test_a_unit_not_running_as_intended_is_never_recorded_nor_trusted(key: str, value: str) -> None:
    broken = {**RECORD, key: value}
    kept, lines = converged.keep({"a": Probe("a", broken), "b": Probe("b", dict(RECORD))},
                                 {"a": INPUTS, "b": INPUTS}, "now")
    assert list(kept) == ["b"]
    assert len(lines) == 1 and lines[0].startswith("a: not recorded: ") and key.split(":")[1] in lines[0]
    # recorded broken by an earlier version, and probed the same now: still not converged
    verdict = converged.judge(
        _targets("a"), {"a": INPUTS}, {"a": {"inputs": INPUTS, "entries": broken}},
        lambda ts: {"a": Probe("a", dict(broken))},
    )
    assert not verdict.fast
    assert verdict.reasons == [f"a: {key.split(':')[1]} (unit): " + ", ".join([
        f"{converged._field(value, 'ActiveState')}/{converged._field(value, 'SubState')}",
        converged._field(value, "UnitFileState"), "should be running"])]


def test_a_role_stopped_debian_service_is_as_intended() -> None:
    stopped = {**RECORD, "unit:prometheus.service": (
        "ActiveState=inactive SubState=dead UnitFileState=disabled NeedDaemonReload=no "
        "FragmentPath=/lib/systemd/system/prometheus.service DropInPaths=")}
    kept, lines = converged.keep({"a": Probe("a", stopped)}, {"a": INPUTS}, "now")
    assert (list(kept), lines) == (["a"], [])

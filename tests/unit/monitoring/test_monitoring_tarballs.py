"""monitoring.install_from: tarballs — the inventory's checks of tarballs_dir (file:line errors
for a missing, duplicate, foreign or unknown-layout tarball), what the bundle carries (the
tarballs, checksummed in the manifest, and the index the role reads), and the role's units."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from installer.base.errors import BundleError, InventoryError
from installer.bundle import build, manifest, monitoring_tarballs, os_packages
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory
from tests.support.monitoring_render import ROLE, render
from tests.support.monitoring_tarballs import VERSIONS, tarball


def site(tmp_path: Path, **monitoring: str) -> Path:
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "config.json").write_text("{}")
    doc = {
        "deployment": "demo", "model": {"path": "weights", "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "10.0.0.1"}], "engine": {"device": "cpu"},
        "monitoring": {"install_from": "tarballs", "tarballs_dir": "tarballs", **monitoring},
    }
    path = tmp_path / "site.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tarballs").mkdir()
    for component, version in VERSIONS.items():
        tarball(tmp_path / "tarballs", component, version)
    return tmp_path / "tarballs"


def _problems(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    return err.value.details


def _tarballs_dir_line(path: Path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "tarballs_dir" in line)


def test_a_complete_folder_loads_and_goes_into_the_bundle_checksummed(tmp_path: Path, folder: Path) -> None:
    inv = load_inventory(site(tmp_path))
    assert inv.monitoring.tarballs_dir == folder
    # Debian's prometheus packages are left out of the bundle: the tarballs replace them.
    assert not {"prometheus", "prometheus-alertmanager", "prometheus-node-exporter"} & set(
        os_packages.all_names(os_packages.wanted(inv)))
    root = tmp_path / "bundle"
    components = monitoring_tarballs.add_to_bundle(inv, root)
    assert components == {f"{c}-tarball": v for c, v in VERSIONS.items()}
    index = json.loads((root / "monitoring" / "tarballs.json").read_text())
    assert index["prometheus"] == {
        "version": "2.53.4", "file": "prometheus-2.53.4.linux-amd64.tar.gz", "top": "prometheus-2.53.4.linux-amd64"}
    listed = {f.path: f for f in manifest.scan(root)}
    for component, version in VERSIONS.items():
        name = f"monitoring/{component}-{version}.linux-amd64.tar.gz"
        assert listed[name].sha256 == hashlib.sha256((folder / Path(name).name).read_bytes()).hexdigest()
    assert "monitoring/tarballs.json" in listed


def test_the_bundle_cache_key_follows_the_tarballs(tmp_path: Path, folder: Path) -> None:
    inv = load_inventory(site(tmp_path))
    before = monitoring_tarballs.bundle_input(inv)
    assert [name for name, _size, _mtime in before] == sorted(p.name for p in folder.iterdir())
    tarball(folder, "node_exporter", VERSIONS["node_exporter"], programs=("node_exporter", "extra"))
    assert monitoring_tarballs.bundle_input(inv) != before
    assert build.bundle_inputs(inv)["monitoring_tarballs"] == monitoring_tarballs.bundle_input(inv)


def test_missing_and_duplicate_tarballs_are_file_line_errors(tmp_path: Path, folder: Path) -> None:
    (folder / f"alertmanager-{VERSIONS['alertmanager']}.linux-amd64.tar.gz").unlink()
    tarball(folder, "prometheus", "3.4.0")
    path = site(tmp_path)
    problems = _problems(path)
    line = _tarballs_dir_line(path)
    assert all(p.startswith(f"{path}:{line}: monitoring.tarballs_dir: ") for p in problems), problems
    text = "\n".join(problems)
    assert "no alertmanager tarball in" in text and "github.com/prometheus/alertmanager/releases" in text
    assert ("2 prometheus tarballs (prometheus-2.53.4.linux-amd64.tar.gz, prometheus-3.4.0.linux-amd64.tar.gz); "
            "keep the one version to install") in text


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        # Binaries at the top instead of in <name>-<version>.linux-amd64/: a repack, not a release.
        (lambda d: tarball(d, "prometheus", "2.53.4", top=""),
         "prometheus-2.53.4.linux-amd64.tar.gz: unknown layout: prometheus-2.53.4.linux-amd64/prometheus, "
         "prometheus-2.53.4.linux-amd64/promtool missing"),
        (lambda d: tarball(d, "alertmanager", "0.28.1", programs=("alertmanager",)),
         "unknown layout: alertmanager-0.28.1.linux-amd64/amtool missing"),
        (lambda d: (d / "node_exporter-1.9.1.linux-amd64.tar.gz").write_text("<html>rate limited</html>"),
         "node_exporter-1.9.1.linux-amd64.tar.gz: cannot be read as a .tar.gz"),
    ],
    ids=["flat", "no-amtool", "not-gzip"],
)
def test_an_unknown_layout_is_an_error(tmp_path: Path, folder: Path, make, expect: str) -> None:  # type: ignore[no-untyped-def]
    make(folder)
    problems = _problems(site(tmp_path))
    assert any(expect in p for p in problems), problems


def test_foreign_files_and_platforms_are_named(tmp_path: Path, folder: Path) -> None:
    tarball(folder, "node_exporter", "1.9.1", platform="linux-arm64")
    (folder / "grafana-11.0.0.linux-amd64.tar.gz").write_bytes(b"")
    (folder / "README.txt").write_text("not a tarball: ignored")
    text = "\n".join(_problems(site(tmp_path)))
    assert "node_exporter-1.9.1.linux-arm64.tar.gz is for linux-arm64; the hosts need the linux-amd64 build" in text
    assert "grafana-11.0.0.linux-amd64.tar.gz is not an upstream release tarball name" in text
    assert "README" not in text


def test_the_bundle_refuses_a_folder_that_changed_after_loading(tmp_path: Path, folder: Path) -> None:
    inv = load_inventory(site(tmp_path))
    (folder / f"prometheus-{VERSIONS['prometheus']}.linux-amd64.tar.gz").unlink()
    with pytest.raises(BundleError) as err:
        monitoring_tarballs.add_to_bundle(inv, tmp_path / "bundle")
    assert any("no prometheus tarball" in d for d in err.value.details)
    assert not (tmp_path / "bundle" / "monitoring").exists()


def test_packages_deployments_carry_no_tarballs(tmp_path: Path) -> None:
    path = tmp_path / "site.yml"
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    path.write_text("deployment: d\nmodel: {path: w, served_name: m}\nhosts: [{name: a, address: 10.1.1.1}]\n")
    inv = load_inventory(path)
    assert inv.monitoring.install_from == "packages"
    assert monitoring_tarballs.add_to_bundle(inv, tmp_path / "b") == {} and not (tmp_path / "b").exists()
    assert monitoring_tarballs.bundle_input(inv) == []
    assert "prometheus" in os_packages.all_names(os_packages.wanted(inv))


def test_the_roles_units_match_the_tarballs_programs() -> None:
    units = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_monitoring_tarball_units"]
    assert set(units) == set(monitoring_tarballs.COMPONENTS)
    for component, unit in units.items():
        assert unit["program"] == monitoring_tarballs.COMPONENTS[component][0]
    text = render(
        "tarball-unit.service.j2", monitoring_tarball_user="prometheus",
        _monitoring_unit={**units["prometheus"], "top": "prometheus-2.53.4.linux-amd64",
                          "dir": "/opt/private-llm-monitoring/prometheus-2.53.4.linux-amd64"},
    )
    assert ("ExecStart=/opt/private-llm-monitoring/prometheus-2.53.4.linux-amd64/prometheus "
            "--config.file=/etc/prometheus/prometheus.yml --storage.tsdb.path=/var/lib/prometheus/metrics2/ $ARGS\n"
            ) in text
    assert "EnvironmentFile=-/etc/default/prometheus\n" in text  # the package path's arguments file
    assert "User=prometheus\n" in text and "ReadWritePaths=/var/lib/prometheus/metrics2\n" in text
    for hardening in ("NoNewPrivileges=true", "ProtectSystem=strict", "CapabilityBoundingSet=\n",
                      "PrivateDevices=true"):
        assert hardening in text
    node = render("tarball-unit.service.j2", monitoring_tarball_user="prometheus",
                  _monitoring_unit={**units["node_exporter"], "top": "node_exporter-1.9.1.linux-amd64",
                                    "dir": "/x/node_exporter-1.9.1.linux-amd64"})
    assert "ReadWritePaths" not in node and "ExecStart=/x/node_exporter-1.9.1.linux-amd64/node_exporter $ARGS" in node

"""dcgm-exporter when the bundle carries it: the bundle marks NVIDIA's exporter package for the
serving hosts, the role's default then picks dcgm over our NVML exporter on those hosts (nvml on
GPU hosts without it, none on CPU deployments), and recording rules map DCGM's fields onto the
pli_gpu_* names the alerts, dashboards and `installer status` read (proven with promtool).

No real DCGM here: there is no NVIDIA GPU or NVIDIA repository in this lab, so the package is a
manifest entry, and dcgm-exporter never ran."""

import shutil
from pathlib import Path

import jinja2
import pytest
import yaml

from installer.bundle import monitoring_dcgm, os_packages
from installer.inventory.models import Inventory
from tests.support.monitoring_render import ROLE, render, role_vars
from tests.support.promtool import promtool

FIXTURES = Path(__file__).parents[1] / "fixtures" / "monitoring"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _inventory(device: str) -> Inventory:
    return Inventory.model_validate({
        "deployment": "d", "model": {"path": "/m", "served_name": "m"}, "engine": {"device": device},
        "hosts": [{"name": "g1", "address": "10.0.0.1"},
                  {"name": "mon", "address": "10.0.0.9", "groups": ["monitoring"]}],
    })


def _packages(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "groups": "", "version": "1", "file": f"debs/{n}_1_amd64.deb"} for n in names]


def exporter_choice(**host_vars: object) -> str:
    """The role's default monitoring_gpu_exporter, evaluated as Ansible would (Jinja2)."""
    return jinja2.Environment().from_string(DEFAULTS["monitoring_gpu_exporter"]).render(
        monitoring_dcgm_exporter_package=DEFAULTS["monitoring_dcgm_exporter_package"], **host_vars).strip()


def test_the_bundle_marks_dcgm_exporter_for_the_serving_hosts() -> None:
    name = monitoring_dcgm.exporter_package()
    assert name == DEFAULTS["monitoring_dcgm_exporter_package"]
    packages = _packages("libnccl2", name, "datacenter-gpu-manager-4-core")
    marked = monitoring_dcgm.mark(_inventory("gpu"), packages)
    assert [p["groups"] for p in marked] == ["", "serving", ""]  # DCGM itself comes as its dependency
    assert monitoring_dcgm.carried(marked) and not monitoring_dcgm.carried(packages)
    # The serving host installs it; a monitoring-only host does not.
    assert [p["name"] for p in os_packages.for_host(marked, ["serving"])] == [name]
    assert os_packages.for_host(marked, ["monitoring"]) == []
    # CPU deployments never run a GPU exporter, whatever a folder holds.
    assert monitoring_dcgm.mark(_inventory("cpu"), packages) == packages


def test_the_role_picks_dcgm_when_the_host_installs_it_else_nvml_on_gpus() -> None:
    name = DEFAULTS["monitoring_dcgm_exporter_package"]
    with_dcgm = monitoring_dcgm.mark(_inventory("gpu"), _packages("libnccl2", name))
    assert exporter_choice(engine_device="gpu", common_packages=os_packages.for_host(with_dcgm, ["serving"])) == "dcgm"
    assert exporter_choice(engine_device="gpu", common_packages=_packages("libnccl2")) == "nvml"
    assert exporter_choice(engine_device="gpu") == "nvml"  # no bundle packages rendered at all
    assert exporter_choice(engine_device="cpu", common_packages=with_dcgm) == "none"
    assert exporter_choice() == "none"


def test_dcgm_fields_feed_the_gpu_alerts(tmp_path: Path) -> None:
    (tmp_path / "alerts.yml").write_text(render("alerts.yml.j2", **role_vars("production")))
    shutil.copy(FIXTURES / "dcgm_test.yml", tmp_path)
    proc = promtool("test", "rules", "dcgm_test.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("exporter", ["nvml", "dcgm"])
def test_both_exporters_are_scraped_on_the_same_port(exporter: str) -> None:
    from tests.support.monitoring_render import inventory_vars

    text = render("prometheus.yml.j2", **inventory_vars({"g1": "10.0.0.1"}, ["g1"], monitoring_gpu_exporter=exporter))
    jobs = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}
    assert jobs["gpu"]["static_configs"][0]["targets"] == ["10.0.0.1:9400"]

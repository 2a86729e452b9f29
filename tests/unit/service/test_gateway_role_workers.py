"""The gateway role's `workers` setting (and its connection cap), rendered the way Ansible
renders the template, and read back by the gateway's own settings model (so the two never
disagree on the name or range)."""

from typing import Any

import pytest

from installer.inventory.gateway import Gateway
from installer.planning.plan import gateway_workers
from service.config import LimitsConfig, Settings
from tests.support.gateway_role import ROLE, gateway_config


def _render(workers: Any, nproc: int) -> dict[str, Any]:
    return gateway_config({
        "gateway_workers": workers,
        "pli_config_dir": "/etc/private-llm", "pli_tls_enabled": False, "pli_tls_dir": "/etc/private-llm/tls",
        "gateway_engines": [{"name": "h1", "url": "http://127.0.0.1:8000", "model": "m"}],
        "__gateway_nproc": {"stdout": str(nproc)},
    })


@pytest.mark.parametrize(("workers", "nproc", "expected"), [
    ("auto", 2, 1),     # the lab's hosts, and CI
    ("auto", 16, 2),    # one H200 machine of the device tool
    ("auto", 224, 8),   # an 8-GPU host: capped, the CPUs are the engines'
    (3, 2, 3),          # the inventory's number wins
])
def test_workers(workers: Any, nproc: int, expected: int) -> None:
    config = _render(workers, nproc)
    assert config["workers"] == expected
    assert Settings.model_validate(config).workers == expected


@pytest.mark.parametrize("nproc", [2, 16, 224])
def test_the_plans_number_renders_what_nproc_did(nproc: int) -> None:
    # The installer resolves "auto" per host (installer/planning/plan.py gateway_workers) and passes the
    # number; the role renders the same gateway.yml as when it counted the CPUs itself.
    assert _render(gateway_workers("auto", nproc), nproc) == _render("auto", nproc)


def test_the_unit_signals_only_the_supervisor() -> None:
    # A worker signalled by systemd and again by the supervisor would cut its streams.
    assert "KillMode=mixed" in (ROLE / "templates" / "gateway.service.j2").read_text()


def test_the_per_client_connection_cap_reaches_the_gateway() -> None:
    config = _render(1, 2)
    cap = Settings.model_validate(config).limits.max_connections_per_client
    # One default, whichever of the three a deployment's value comes from.
    assert cap == Gateway().max_connections_per_client == LimitsConfig().max_connections_per_client
    # One address (a NAT, a load balancer, `installer bench -c N`) may fill every in-flight slot
    # before its connections are refused.
    assert cap >= max(Gateway().max_in_flight, LimitsConfig().max_in_flight, config["limits"]["max_in_flight"])

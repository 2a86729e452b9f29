"""Render the monitoring role's templates the way Ansible does (Jinja2, trim_blocks), with the
role's defaults and vars and a small inventory, so tests can hand the result to promtool."""

from pathlib import Path
from typing import Any

import jinja2
import yaml

ROLE = Path(__file__).parents[2] / "playbooks" / "roles" / "monitoring"


def role_vars(profile: str = "production", **overrides: Any) -> dict[str, Any]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    internal = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    values: dict[str, Any] = {**defaults, **internal, "monitoring_alert_profile": profile}
    values["monitoring_gpu_exporter"] = "none"
    values.update(overrides)
    # What tasks/preflight.yml derives.
    values.setdefault("_monitoring_scheme", values.get("pli_gateway_scheme", "http"))
    values.setdefault("_monitoring_ca_file", "/etc/private-llm/tls/ca.pem")
    values["_monitoring_for"] = values["_monitoring_for_by_profile"][values["monitoring_alert_profile"]]
    values["_monitoring_interval"] = "5s" if profile == "test" else values["monitoring_scrape_interval"]
    return values


def render(template: str, **variables: Any) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        trim_blocks=True,  # Ansible's template module default
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    text = env.get_template(template).render(ansible_managed="managed by a test", **variables)
    # Ansible ends the output with at least as many newlines as the template has at its end,
    # even where trim_blocks took one after a closing tag.
    source = (ROLE / "templates" / template).read_text()
    missing = (len(source) - len(source.rstrip("\n"))) - (len(text) - len(text.rstrip("\n")))
    return text + "\n" * max(0, missing)


def inventory_vars(
    serving: dict[str, str], monitoring: list[str], **overrides: Any
) -> dict[str, Any]:
    """Variables prometheus.yml.j2 sees on the first monitoring host of this inventory."""
    hosts = dict(serving)
    hostvars = {name: {"ansible_host": address} for name, address in hosts.items()}
    return role_vars(
        groups={"serving": list(serving), "monitoring": monitoring},
        hostvars=hostvars,
        inventory_hostname=monitoring[0],
        gateway_port=8080,
        monitoring_engines={name: [name] for name in serving},
        pli_deployment="prod-a",
        **overrides,
    )

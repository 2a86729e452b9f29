"""The keepalived role's keepalived.conf, rendered as Ansible renders it (the role's defaults
under the variables given, undefined variables an error), for the unit tests and for the
integration test that runs it in real keepalived."""

from typing import Any

import jinja2
import yaml

from tests.support import REPO

ROLE = REPO / "playbooks" / "roles" / "keepalived"
CHECK_SCRIPT = ROLE / "files" / "readyz_check.py"


def keepalived_conf(host: str, interface: str, variables: dict[str, Any]) -> str:
    """keepalived.conf of inventory host `host`, its VRRP interface `interface` (what the role
    finds on the host), `variables` over the role's defaults."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True, undefined=jinja2.StrictUndefined
    )
    env.filters["float"] = float
    env.filters["int"] = int
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return env.get_template("keepalived.conf.j2").render({
        **defaults, "ansible_managed": "test", "inventory_hostname": host,
        "__keepalived_interface": interface, **variables,
    })

"""The gateway role writes the files its configuration names before the configuration itself:
systemd starts a socket-activated gateway on the first connection, at any moment of a run, and
a gateway that finds gateway.yml naming a file not there yet fails to start."""

import re
from pathlib import Path

import yaml

ROLE = Path(__file__).parents[3] / "playbooks" / "roles" / "gateway"


def test_files_named_by_the_configuration_are_written_first() -> None:
    template = (ROLE / "templates" / "gateway.yml.j2").read_text()
    named = set(re.findall(r"\{\{ pli_config_dir \}\}/([\w.-]+)", template))
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    order = [
        Path(module["dest"]).name
        for task in tasks
        for name, module in task.items()
        if name in ("ansible.builtin.copy", "ansible.builtin.template") and isinstance(module, dict)
    ]
    written_here = named & set(order)
    assert {"keys.json", "metrics.token"} <= written_here, order
    for name in written_here:
        assert order.index(name) < order.index("gateway.yml"), f"{name} is written after gateway.yml: {order}"

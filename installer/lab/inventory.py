"""The inventory a lab writes for the rest of the product, and the model it points at.

Written as text rather than dumped so the file reads like a hand-written example (header
comment, key order) — it is the first inventory a newcomer sees.
"""

import json
import re
from pathlib import Path

from installer.lab import state

MODEL_SERVED_NAME = "tiny-llama"
_PLAIN_SCALAR = re.compile(r"[A-Za-z0-9_./@+-]+")


def _scalar(value: str) -> str:
    # Quote only what YAML could misread (spaces, colons, '#'); JSON strings are valid YAML.
    return value if _PLAIN_SCALAR.fullmatch(value) else json.dumps(value)


def render(
    name: str,
    hosts: list[tuple[str, str, str]],
    private_key: Path,
    known_hosts: Path,
    model_path: Path,
) -> str:
    """The inventory text; `hosts` are (name, address, target), each host's target declared."""
    count = f"{len(hosts)} host" + ("" if len(hosts) == 1 else "s")
    lines = [
        f'# written by `installer lab up` — lab "{name}", {count}',
        f"deployment: {name}",
        "provider: baremetal",
        "ssh:",
        "  user: root",
        f"  private_key: {_scalar(str(private_key))}",
        f"  known_hosts: {_scalar(str(known_hosts))}",
        "hosts:",
    ]
    for host_name, address, target in hosts:
        lines += [f"  - name: {host_name}", f"    address: {address}", f"    target: {target}"]
    lines += [
        "model:",
        f"  path: {_scalar(str(model_path))}",
        f"  served_name: {MODEL_SERVED_NAME}",
        "engine:",
        "  device: cpu",
        "  max_model_len: 1024",
        "  max_num_seqs: 8",
        "  # lab hosts share this machine's cores: pinning every engine to core 0 starves a restart",
        "  cpu_omp_threads_bind: nobind",
        "monitoring:",
        "  # a lab shows alerts within seconds (10 s `for:`, 5 s scrapes); production rides out blips",
        "  alert_profile: test",
    ]
    return "\n".join(lines) + "\n"


def default_path() -> Path:
    return Path("inventory") / "lab.yml"


def write(path: Path, text: str) -> Path:
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def ensure_model() -> Path:
    """The lab's tiny model, made once (make_tiny_model leaves it complete or absent)."""
    path = state.model_dir()
    if not (path / "config.json").is_file():
        # Imported here: it pulls in numpy/tokenizers, which the rest of the lab never needs.
        from installer.modelmaker import make_tiny_model

        make_tiny_model(path)
    return path

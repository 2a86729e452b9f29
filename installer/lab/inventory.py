"""The inventory a lab writes for the rest of the product, and the model it points at.

Written as text rather than dumped so the file reads like a hand-written example (header
comment, key order) — it is the first inventory a newcomer sees.
"""

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from installer.lab import state

if TYPE_CHECKING:
    from installer.modelmaker import Kind

MODEL_SERVED_NAME = "tiny-llama"
# The retrieval models beside the chat model (installer/modelmaker.py kinds), as in the lab's
# inventory: the embedding model on the first host, the reranker on the second.
EMBED_SERVED_NAME = "tiny-embed"
RERANK_SERVED_NAME = "tiny-rerank"
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
    embed_path: Path | None = None,
    rerank_path: Path | None = None,
) -> str:
    """The inventory text; `hosts` are (name, address, target), each host's target declared.
    With `embed_path` and `rerank_path`, a `models:` list: the chat model on every host, the
    embedding model on the first host, the reranker on the second (the first if only one)."""
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
    if embed_path is None or rerank_path is None:
        lines += ["model:", f"  path: {_scalar(str(model_path))}", f"  served_name: {MODEL_SERVED_NAME}"]
    else:
        first, second = hosts[0][0], hosts[1 % len(hosts)][0]
        lines += [
            "models:",
            "  # the first entry is the primary model: chat on every host",
            "  - name: chat",
            f"    served_name: {MODEL_SERVED_NAME}",
            f"    path: {_scalar(str(model_path))}",
            "  - name: embed",
            f"    served_name: {EMBED_SERVED_NAME}",
            f"    path: {_scalar(str(embed_path))}",
            "    task: embed",
            f"    hosts: [{first}]",
            "  # a cross-encoder: /v1/rerank and /v1/score",
            "  - name: rerank",
            f"    served_name: {RERANK_SERVED_NAME}",
            f"    path: {_scalar(str(rerank_path))}",
            "    task: score",
            f"    hosts: [{second}]",
        ]
    lines += [
        "engine:",
        "  device: cpu",
        "  max_model_len: 1024",
        "  max_num_seqs: 8",
        "  # lab hosts share this machine's cores: pinning every engine to core 0 starves a restart",
        "  cpu_omp_threads_bind: nobind",
        "  # the model in vLLM's engine-core process: a faster start, more tokens a second, less RAM",
        "  cpu_inline_worker: true",
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


def ensure_model(kind: "Kind" = "chat") -> Path:
    """The lab's tiny model of `kind` (installer/modelmaker.py), made once (make_tiny_model
    leaves it complete or absent)."""
    path = state.model_dir()
    if kind != "chat":
        path = path.with_name(f"tiny-{kind}")
    if not (path / "config.json").is_file():
        # Imported here: it pulls in numpy/tokenizers, which the rest of the lab never needs.
        from installer.modelmaker import make_tiny_model

        make_tiny_model(path, kind=kind)
    return path

"""For the weights fan-out's tests: a deployment host's TLS client and GET against serve.py,
and an inventory of three hosts with the model section given (model.distribute)."""

import http.client
import ssl
from pathlib import Path

TOKEN = "a" * 40


def client(pki: dict[str, Path], who: str | None = "client") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    context.check_hostname = False  # the certificates here name 127.0.0.1 as an address
    if who:
        context.load_cert_chain(str(pki[who]), str(pki[who + "-key"]))
    return context


def get(port: int, context: ssl.SSLContext, path: str, token: str = TOKEN, rng: str = "") -> tuple[int, dict, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if rng:
        headers["Range"] = rng
    conn.request("GET", path, headers=headers)
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    return answer.status, dict(answer.getheaders()), body


def fanout_inventory(tmp_path: Path, model: str, tls: str = "") -> Path:
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    (weights / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    path = tmp_path / "inv.yml"
    path.write_text(
        "deployment: w\n"
        "hosts:\n"
        "  - {name: h1, address: 10.0.0.1}\n"
        "  - {name: h2, address: 10.0.0.2}\n"
        "  - {name: h3, address: 10.0.0.3}\n"
        f"{model}"
        "engine: {device: cpu}\n"
        f"{tls}"
    )
    return path

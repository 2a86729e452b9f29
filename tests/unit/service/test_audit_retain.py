"""audit.retain (#38 item 3, service/audit_retain.py): the built-in redactions and the operator's,
applied before a record is written; the answer gathered from a whole body or a stream's deltas and
cut at max_chars without leaking a secret across the cut; and with retention off the record is the
one the trail always wrote."""

import asyncio
import json
import time
from typing import Any

import pytest

from service.accesslog import AccessLog, AccessLogMiddleware, RequestInfo
from service.audit_retain import BUILTIN, Redactor, Retention, pattern_problem
from service.config import ConfigError, RequestAuditConfig
from service.metrics import Metrics

# What a record held before audit.retain existed (service/accesslog.py), in its order.
FIELDS = ["ts", "request_id", "subject", "tenant", "path", "model", "stage", "status",
          "prompt_tokens", "completion_tokens", "latency_ms", "client"]


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("write to alice.wong@mail.example.com now", "write to [redacted:email] now"),
        ("my key is sk-pli-AbCdEf0123456789xyz.", "my key is [redacted:api_key]."),
        ("openai sk-proj-abcdefghijklmnopqrstuvwx1234", "openai [redacted:api_key]"),
        ("hf_abcdefghijklmnopqrstuvwxyz0123456 and AKIAIOSFODNN7EXAMPLE",
         "[redacted:api_key] and [redacted:api_key]"),
        ("Authorization: Bearer abc.DEF-123_x=", "Authorization: [redacted:bearer]"),
        ("token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl end", "token [redacted:bearer] end"),
        ("card 4111 1111 1111 1111 exp", "card [redacted:card] exp"),
        ("card 4111-1111-1111-1111", "card [redacted:card]"),
        ("from 10.0.4.17:8080 and 192.168.1.1.", "from [redacted:ipv4]:8080 and [redacted:ipv4]."),
        # Chinese text right before or after: no ASCII word edge there, still redacted
        ("我的密钥是sk-pli-Zx81mQ2pLk9Rt4Vw请保密，联系bob@example.com谢谢，地址10.1.2.3。",  # noqa: RUF001
         "我的密钥是[redacted:api_key]请保密，联系[redacted:email]谢谢，地址[redacted:ipv4]。"),  # noqa: RUF001
        ("令牌Bearer abc.DEF，AKIAIOSFODNN7EXAMPLE密", "令牌[redacted:bearer]，[redacted:api_key]密"),  # noqa: RUF001
        # inside a word: not a key
        ("the risk-adjusted-return-calculations and ask-pli-12345678", "the risk-adjusted-return-calculations "
         "and ask-pli-12345678"),
        # not redacted: a version, a year and a short number, an address that is not one
        ("vLLM 0.26.1 in 2026, order 12345, 300.1.2.3, 1.2.3.4.5",
         "vLLM 0.26.1 in 2026, order 12345, 300.1.2.3, 1.2.3.4.5"),
        ("v1.2.3 4111 1111 1111 1111", "v1.2.3 [redacted:card]"),
    ],
)
def test_the_builtin_redactions(text: str, redacted: str) -> None:
    assert Redactor(BUILTIN)(text) == redacted


def test_a_key_and_an_address_in_a_prompt_are_redacted_in_the_record() -> None:
    policy = Retention(True, True, [*BUILTIN, ("employee", r"\bEMP-\d{6}\b")], 1000)
    prompt = [{"role": "system", "content": "You help EMP-004211."},
              {"role": "user", "content": "Send sk-pli-Zx81mQ2pLk9Rt4Vw to bob@example.com"}]
    retained = policy.start(prompt)
    assert retained is not None
    retained.whole(json.dumps({"choices": [{"index": 0, "message": {"content": "Mailed bob@example.com."}}]}).encode(),
                   chat=True)
    assert retained.fields() == {
        "prompt": [{"role": "system", "content": "You help [redacted:employee]."},
                   {"role": "user", "content": "Send [redacted:api_key] to [redacted:email]"}],
        "answer": "Mailed [redacted:email].",
    }
    assert prompt[1]["content"].startswith("Send sk-pli-")  # the request itself is untouched


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(", "does not compile"),
        ("a*", "can match the empty string"),
        ("x?", "can match the empty string"),
        ("(?=secret)", "can match the empty string"),
        (r"^|\d+", "can match the empty string"),
        (r"\b", "can match the empty string"),
    ],
)
def test_a_pattern_that_fails_or_can_match_nothing_is_refused(pattern: str, problem: str) -> None:
    assert problem in (pattern_problem(pattern) or "")
    with pytest.raises(ValueError, match="redaction 'x'"):
        Redactor([("x", pattern)])


def test_a_pattern_that_needs_a_character_is_accepted() -> None:
    assert pattern_problem(r"\bEMP-\d{6}\b") is None and pattern_problem("(?i)project [a-z]+") is None


def test_the_gateways_config_refuses_an_unknown_name_and_an_empty_match() -> None:
    base = {"dir": "/tmp/x-audit-unused", "retain": {"prompts": True}}
    assert RequestAuditConfig.model_validate(base).retain.redact == list(BUILTIN)  # type: ignore[union-attr]
    for redact, message in ((["phone"], "unknown redaction 'phone'"),
                            ([{"name": "x", "pattern": "a*"}], "can match the empty string")):
        with pytest.raises((ValueError, ConfigError), match=message):
            RequestAuditConfig.model_validate({**base, "retain": {"prompts": True, "redact": redact}})


def _events(*objs: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def test_a_streams_answer_is_the_text_of_its_deltas_per_choice() -> None:
    retained = Retention(False, True, BUILTIN, 100).start(None)
    assert retained is not None
    retained.stream(_events({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                            {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}))
    retained.stream(_events({"choices": [{"index": 1, "delta": {"content": "Hi"}}]},
                            {"choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": "stop"}]},
                            {"choices": [], "usage": {"prompt_tokens": 3}}))
    assert retained.fields() == {"answer": ["Hello world", "Hi"]}  # prompts not kept: no field
    completion = Retention(False, True, BUILTIN, 100).start(None)
    assert completion is not None
    completion.stream(_events({"choices": [{"index": 0, "text": " tok0"}]},
                              {"choices": [{"index": 0, "text": " tok1"}]}))
    assert completion.fields() == {"answer": " tok0 tok1"}


def test_the_cap_cuts_after_redaction_so_a_secret_across_it_does_not_leak() -> None:
    retained = Retention(True, True, BUILTIN, 20).start("x" * 15 + " mail carol@example.org " + "y" * 5000)
    assert retained is not None
    for _ in range(100):  # far past the cap: gathered only up to it and its margin
        retained.stream(_events({"choices": [{"index": 0, "delta": {"content": "abc sk-pli-0123456789abcdef "}}]}))
    assert retained.answer is not None and sum(len(p) for p in retained.answer[0]) <= 20 + 1024
    fields = retained.fields()
    assert fields["prompt"] == "x" * 15 + " mail" and fields["prompt_cut"] is True
    assert fields["answer"] == "abc [redacted:api_ke" and fields["answer_cut"] is True
    assert "carol" not in json.dumps(fields) and "0123" not in json.dumps(fields)


def test_a_prompt_of_token_ids_is_cut_too() -> None:
    retained = Retention(True, False, BUILTIN, 30).start([list(range(1000))])
    assert retained is not None
    fields = retained.fields()
    assert fields["prompt"][0][:3] == [0, 1, 2] and len(json.dumps(fields["prompt"])) < 100
    assert fields["prompt_cut"] is True


class _Kept(AccessLog):
    def __init__(self) -> None:
        super().__init__(None)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)


def _audited(retention: Retention | None) -> dict[str, Any]:
    """The audit record the middleware writes for one chat answered by an app that does what the
    gateway's handlers do."""
    audit = _Kept()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        info: RequestInfo = scope["state"]["info"]
        info.key_name, info.model, info.prompt_tokens, info.completion_tokens = "app", "tiny", 7, 2
        if retention is not None:
            info.retained = retention.start([{"role": "user", "content": "hi bob@example.com"}])
            info.retained.stream(_events({"choices": [{"index": 0, "delta": {"content": "hello"}}]}))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def go() -> None:
        mw = AccessLogMiddleware(app, _Kept(), Metrics(), audit)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(_m: Any) -> None:
            return None

        scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "client": ("10.0.0.9", 5)}
        await mw(scope, receive, send)

    asyncio.run(go())
    (record,) = audit.records
    return record


def test_with_retention_off_the_record_is_the_one_always_written() -> None:
    off = _audited(None)
    assert list(off) == FIELDS
    on = _audited(Retention(True, True, BUILTIN, 100))
    assert list(on) == [*FIELDS, "prompt", "answer"]  # added after: the other fields are as they were
    assert on["prompt"] == [{"role": "user", "content": "hi [redacted:email]"}] and on["answer"] == "hello"
    same = ("subject", "tenant", "path", "model", "stage", "status", "prompt_tokens", "completion_tokens", "client")
    assert {k: on[k] for k in same} == {k: off[k] for k in same}
    assert Retention(False, False, BUILTIN, 100).start("x") is None  # neither kept: nothing gathered


ADVERSARIAL = ("a", "1", "sk-", "1.", "-eyJ", "a@", "eyJ", "Bearer ")


def _best(redactor: Redactor, text: str) -> float:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        redactor(text)
        times.append(time.perf_counter() - t)
    return min(times)


def test_the_built_in_redactions_take_time_in_proportion_to_the_text() -> None:
    """A client's text must not make a pattern quadratic (the review found email at 1.26 s for
    17,408 'a's). Eight times the text (up to max_chars' ceiling) takes about eight times as long
    (measured 7.3-18x), where a quadratic pattern takes about 64 times."""
    redactor = Redactor(list(BUILTIN))
    ratios = {}
    for unit in ADVERSARIAL:
        # the smallest of three measured ratios: the shared machine's load once made a linear
        # pattern measure 45x (CI rehearsal), while a quadratic one measures ~64x every time
        tries = []
        for _ in range(3):
            small, large = (_best(redactor, unit * (n // len(unit))) for n in (8_192, 65_536))
            tries.append(large / max(small, 1e-5))
            if tries[-1] < 32:
                break
        ratios[unit] = min(tries)
    assert max(ratios.values()) < 32, ratios


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(?:[a-z]+\.)*com", r"(x|y+)+z"])
def test_an_operators_pattern_that_repeats_a_repeating_group_is_refused(pattern: str) -> None:
    problem = pattern_problem(pattern)
    assert problem and "repeats a group that itself repeats" in problem
    assert pattern_problem(r"secret-[A-Za-z0-9]{8,}") is None


def test_a_prompts_dict_keys_are_redacted_and_counted_and_the_walk_stops_at_the_budget() -> None:
    policy = Retention(prompts=True, answers=False, redact=["email"], max_chars=40)
    kept, cut = policy.clean({"ann@example.com": "x", **{f"k{i}": i for i in range(100)}}, [40])
    assert "ann@example.com" not in json.dumps(kept) and "[redacted:email]" in kept
    assert cut and len(kept) < 20

"""What the request audit trail keeps of a request's text, when the operator turns it on
(inventory `audit.retain`, docs/audit.md#keeping-prompts-and-answers); off by default, and then
nothing here runs.

The redaction hook is a list of regular expressions, built-in ones by name and the operator's
own, applied to every string before it is written: the inventory carries data, never code, so
nothing of it is executed on a host (a plugin would run with the gateway's rights, see every
request and the keys file, and be one more thing to ship, sign and review on every host). A
pattern that can match the empty string is refused: it would match everywhere and nowhere.

Python's `re` has no time limit, and the text is the client's: every string is cut to
`max_chars` (plus a margin, so a secret across the cut is still seen whole) *before* a pattern
runs, which bounds what one request can cost; docs/audit.md asks for patterns without nested
quantifiers. Then it is cut to `max_chars`, and the record says so (`prompt_cut`, `answer_cut`).
"""

import re
from collections.abc import Iterable
from typing import Any

from service.choices import choices

# Text looked at past the cap, so a secret that crosses it is still matched whole (and then cut).
MARGIN = 1024

# Specific before generic: a key's digits are not taken for a card number first.
# Two rules keep them fast and right (tests/unit/service/test_audit_retain.py):
# - each starts with a literal or a character class, so `re` skips ahead to where one may start
#   (a lookbehind or `\b` first makes it try every position: 4 to 9 times slower, measured); the
#   "not after a letter" check comes after the first character instead;
# - word edges are ASCII classes, not `\b`: `\w` is Unicode, so `\b` sees no edge between a
#   Chinese character and a key written right after it (我的密钥是sk-pli-…) and would keep it.
_NOT_AFTER = "(?<![A-Za-z0-9_]{})"
BUILTIN: dict[str, str] = {
    # the product's own keys (installer/secrets/keys.py), OpenAI-style, Hugging Face, GitHub, AWS key ids
    "api_key": "s" + _NOT_AFTER.format("s") + r"k-(?:pli-[A-Za-z0-9_\-]{8,}|(?:[a-z]+-)?[A-Za-z0-9_\-]{20,})"
    "|h" + _NOT_AFTER.format("h") + r"f_[A-Za-z0-9]{30,}"
    "|g" + _NOT_AFTER.format("g") + r"h[pousr]_[A-Za-z0-9]{36,}"
    "|A" + _NOT_AFTER.format("A") + r"(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    # an Authorization header's value, and a JWT wherever it stands
    "bearer": "[Bb](?<![A-Za-z0-9_][Bb])[Ee][Aa][Rr][Ee][Rr]" + r"\s+[A-Za-z0-9._~+/\-]+=*"
    r"|e(?<![A-Za-z0-9_\-]e)yJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    # only where a run of local-part characters starts (else every position of a long run is a
    # start that scans the run for '@': quadratic), at most 64 of them (RFC 5321's limit)
    "email": r"[A-Za-z0-9._%+\-](?<![A-Za-z0-9._%+\-][A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]{0,63}"
    r"@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63}){0,8}\.[A-Za-z]{2,24}",
    # 13 to 19 digits, spaces or dashes between them (no Luhn check: redacting more is the safe side)
    "card": r"[0-9](?<![0-9.\-][0-9])(?:[ \-]?[0-9]){12,18}(?![0-9\-])",
    # four numbers of 1 to 3 digits; an octet above 255 is no address (_ACCEPT)
    "ipv4": r"[0-9](?<![0-9.][0-9])[0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![0-9]|\.[0-9])",
}
_ACCEPT = {"ipv4": lambda text: all(int(octet) <= 255 for octet in text.split("."))}
NAME = r"^[a-z][a-z0-9_]{0,31}$"


def pattern_problem(pattern: str, builtin: bool = False) -> str | None:
    """Why `pattern` cannot be a redaction (None: it can): it does not compile, it can match the
    empty string, or (the operator's own) it repeats a repeating group."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"does not compile: {exc}"
    try:
        # sre's own minimum width: exact (a lookahead alone, `a*`, `x?` are all 0).
        shortest = re._parser.parse(pattern, compiled.flags).getwidth()[0]  # type: ignore[attr-defined]
    except (AttributeError, re.error):
        shortest = 0 if compiled.search("") else 1
    if shortest == 0:
        return "can match the empty string (it would match everywhere); make it need at least one character"
    if not builtin and _nested_repeat(re._parser.parse(pattern, compiled.flags)):  # type: ignore[attr-defined]
        return ("repeats a group that itself repeats (like (a+)+ or (\\w+\\s?)*), which can take exponential "
                "time on a client's text; repeat a plain character class instead")
    return None


_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _nested_repeat(tree: Any, inside: bool = False) -> bool:
    """Whether an unbounded-ish repeat (max > 1) holds another one: the shape whose backtracking
    grows exponentially (Python's `re` has no time limit)."""
    for op, av in tree:
        name = str(op)
        if name in _REPEATS:
            _low, high, body = av
            repeats = high is None or str(high) == "MAXREPEAT" or high > 1
            if (repeats and inside) or _nested_repeat(body, inside or repeats):
                return True
        elif name == "SUBPATTERN":
            found = _nested_repeat(av[-1], inside)
        elif name == "BRANCH":
            found = any(_nested_repeat(b, inside) for b in av[1])
        elif name in ("ASSERT", "ASSERT_NOT"):
            found = _nested_repeat(av[1], inside)
        else:
            found = False
        if found:
            return True
    return False


class Redactor:
    """The redactions in order: each match becomes `[redacted:<name>]`."""

    def __init__(self, redact: Iterable[str | tuple[str, str]]) -> None:
        self.rules: list[tuple[re.Pattern[str], Any]] = []
        for item in redact:
            name, pattern = (item, BUILTIN[item]) if isinstance(item, str) else item
            problem = pattern_problem(pattern, builtin=isinstance(item, str))
            if problem:  # the inventory refuses it first (installer/inventory/audit.py)
                raise ValueError(f"redaction {name!r}: the pattern {problem}")
            marker = f"[redacted:{name}]"
            accept = _ACCEPT.get(name) if isinstance(item, str) else None
            if accept is not None:
                self.rules.append((re.compile(pattern), lambda m, a=accept, r=marker: r if a(m.group()) else m.group()))
            else:
                self.rules.append((re.compile(pattern), marker))

    def __call__(self, text: str) -> str:
        for pattern, replacement in self.rules:
            text = pattern.sub(replacement, text)
        return text


class Retention:
    """The operator's policy: which texts, redacted how, how long at most."""

    def __init__(self, prompts: bool, answers: bool, redact: Iterable[str | tuple[str, str]], max_chars: int) -> None:
        self.prompts, self.answers, self.max_chars = prompts, answers, max_chars
        self.redact = Redactor(redact)

    def start(self, prompt: Any) -> "Retained | None":
        """A request's retained texts; None when neither is kept."""
        if not (self.prompts or self.answers):
            return None
        return Retained(self, prompt if self.prompts else None)

    def clean(self, value: Any, budget: list[int]) -> tuple[Any, bool]:
        """`value` with every string redacted and the strings cut to `budget[0]` characters in
        all (taken from it); whether something was cut. A list's numbers (a prompt of token ids)
        cost their digits, and a list stops where the budget ends."""
        if isinstance(value, str):
            if budget[0] <= 0:
                return "", bool(value)
            raw = value[: budget[0] + MARGIN]
            text = self.redact(raw)
            cut = len(text) > budget[0] or len(raw) < len(value)
            text = text[: budget[0]]
            budget[0] -= len(text)
            return text, cut
        if isinstance(value, list):
            cut = False
            out: list[Any] = []
            for item in value:
                if budget[0] <= 0:
                    return out, True
                if not isinstance(item, (str, list, dict)):
                    budget[0] -= len(str(item))
                item, c = self.clean(item, budget)
                out.append(item)
                cut = cut or c
            return out, cut
        if isinstance(value, dict):
            # keys are the client's text too: redacted and counted like values, and the walk
            # stops where the budget ends (review: a prompt of many dicts kept its whole shape)
            cut = False
            kept: dict[Any, Any] = {}
            for key, item in value.items():
                if budget[0] <= 0:
                    return kept, True
                name, c_key = self.clean(key, budget) if isinstance(key, str) else (key, False)
                if not isinstance(item, (str, list, dict)):
                    budget[0] -= len(str(item))
                kept[name], c = self.clean(item, budget)
                cut = cut or c or c_key
            return kept, cut
        return value, False


class Retained:
    """One request's prompt, and its answer as the client received it: a whole answer's body,
    or the text of the stream's deltas (both engines' for a resumed stream), gathered only up
    to the cap and its margin."""

    def __init__(self, policy: Retention, prompt: Any) -> None:
        self.policy = policy
        self.prompt = prompt
        # the choices' texts by index (n > 1 streams interleave them)
        self.answer: dict[int, list[str]] | None = {} if policy.answers else None
        self._room = policy.max_chars + MARGIN
        self._beyond = False  # text came past what was gathered

    def whole(self, body: bytes, chat: bool) -> None:
        """The text of a whole (not streamed) answer's choices."""
        if self.answer is None:
            return
        for choice in choices(body):
            part = choice.get("message") if chat else choice
            if isinstance(part, dict):
                self._take(choice.get("index"), part.get("content") if chat else part.get("text"))

    def stream(self, block: bytes) -> None:
        """A block of whole events as sent to the client: the text of their deltas."""
        if self.answer is None:
            return
        for event in block.split(b"\n\n"):
            if not event.startswith(b"data: {"):
                continue
            for choice in choices(event[6:]):
                delta = choice.get("delta")
                self._take(choice.get("index"), delta.get("content") if isinstance(delta, dict) else choice.get("text"))

    def _take(self, index: Any, text: Any) -> None:
        if not isinstance(text, str) or not text or self.answer is None:
            return
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        if len(text) > self._room:
            self._beyond = True
        piece = text[: self._room]
        self._room -= len(piece)
        if piece:
            self.answer.setdefault(index, []).append(piece)

    def fields(self) -> dict[str, Any]:
        """The record's retained fields, redacted and cut: written after the others, so the
        record's other fields are the same whether retention is on or off."""
        out: dict[str, Any] = {}
        policy = self.policy
        if policy.prompts and self.prompt is not None:
            out["prompt"], cut = policy.clean(self.prompt, [policy.max_chars])
            if cut:
                out["prompt_cut"] = True
        if self.answer is not None:
            # one string, or one per choice (n > 1), in index order
            texts = ["".join(parts) for _, parts in sorted(self.answer.items())]
            answer: Any = texts if len(texts) > 1 else "".join(texts)
            out["answer"], cut = policy.clean(answer, [policy.max_chars])
            if cut or self._beyond:
                out["answer_cut"] = True
        return out

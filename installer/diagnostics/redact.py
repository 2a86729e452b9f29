"""The secret scan every file of a support archive goes through before it is written.

A rules table of our own rather than a scanner library: the scanners (detect-secrets and its
forks) report lines of source code to a reviewer, while here each hit must be cut out of
configuration, environment files and journal lines, and the rules must know this product's own
secrets (`sk-pli-` keys, the Redis password in `requirepass` and in `redis://` URLs, the
scrape token). The control machine also knows the deployment's secrets themselves: any copy
of one is cut whatever its form (`known`).

A hit is replaced by `[REDACTED:<rule>]` and reported as (file, rule, count), never with its
value.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

MARK = "[REDACTED:{rule}]"
_NAMES = (
    r"password|passwd|passphrase|pwd|secret|secret[_-]?key|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credentials?|auth[_-]?key|client[_-]?secret"
)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    group: int = 0  # the part of a match that is the secret (0: all of it)
    what: str = ""


# Specific rules first: a value they cut is not cut again by the generic ones after them.
RULES: tuple[Rule, ...] = (
    Rule("private-key", re.compile(
        r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----(.+?)(?:-----END \1PRIVATE KEY-----|\Z)", re.S), 2,
        "a PEM private key block (RSA, EC, OPENSSH, ENCRYPTED, ...)"),
    Rule("pli-api-key", re.compile(r"\bsk-pli-[A-Za-z0-9_\-]{8,}"), 0, "an API key of this product"),
    Rule("api-key", re.compile(r"\bsk-(?!pli-)(?:[a-z]+-)?[A-Za-z0-9_\-]{20,}"), 0,
         "an OpenAI-style API key (sk-...)"),
    Rule("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), 0, "a Hugging Face token"),
    Rule("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), 0, "a GitHub token"),
    Rule("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), 0,
         "an AWS access key id"),
    Rule("aws-secret-access-key", re.compile(
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1,
         "an AWS secret access key"),
    Rule("tencent-secret-id", re.compile(r"\bAKID[A-Za-z0-9]{32}\b"), 0, "a Tencent Cloud SecretId"),
    Rule("alibaba-access-key-id", re.compile(r"\bLTAI[A-Za-z0-9]{12,20}\b"), 0, "an Alibaba Cloud AccessKey id"),
    Rule("jdcloud-access-key", re.compile(r"\bJDC_[A-Z0-9]{20,40}\b"), 0, "a JD Cloud AccessKey id"),
    Rule("url-password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@"), 1,
         "the password in a URL (redis://:PASSWORD@host, https://user:PASSWORD@...)"),
    Rule("redis-password", re.compile(r"(?im)^\s*(?:requirepass|masterauth)\s+(\S+)"), 1,
         "Redis's requirepass/masterauth"),
    Rule("bearer-token", re.compile(r"(?i)\b(?:Bearer|Basic)[ \t]+([A-Za-z0-9._~+/\-]{12,}=*)"), 1,
         "an Authorization header's credentials"),
    Rule("secret-flag", re.compile(rf"(?i)--[a-z0-9\-]*(?:{_NAMES})(?:[= ])\s*[\"']?([^\s\"']+)"), 1,
         "a command-line flag that takes a secret (--api-key X, --password=X)"),
    Rule("secret-assignment", re.compile(
        rf"(?i)\b[A-Za-z0-9_.\-]*(?:{_NAMES})\b[\"']?\s*(?:=|:)[ \t]*[\"']?([^\s\"',;}}]+)"), 1,
         "key=value or key: value with a password/secret/token/key name"),
)

# What secret-assignment finds that is no secret: empty-ish values and references to a file.
_NOT_SECRET = re.compile(
    r"(?i)^(?:null|none|true|false|yes|no|\*+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|/\S*|\[?REDACTED\S*)$"
)


@dataclass(frozen=True)
class Hit:
    file: str
    rule: str
    count: int

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "rule": self.rule, "count": self.count}


def redact(text: str, known: Mapping[str, str] | None = None) -> tuple[str, Counter[str]]:
    """`text` with every secret cut, and how many were cut per rule."""
    counts: Counter[str] = Counter()
    for name, value in sorted((known or {}).items()):
        if value and value in text:
            counts[f"known-{name}"] += text.count(value)
            text = text.replace(value, MARK.format(rule=f"known-{name}"))
    for rule in RULES:
        text = _apply(rule, text, counts)
    return text, counts


def _apply(rule: Rule, text: str, counts: Counter[str]) -> str:
    def cut(m: re.Match[str]) -> str:
        secret = m.group(rule.group)
        if not secret or "[REDACTED" in secret or (rule.name == "secret-assignment" and _NOT_SECRET.match(secret)):
            return m.group(0)
        counts[rule.name] += 1
        start, end = m.start(rule.group) - m.start(0), m.end(rule.group) - m.start(0)
        whole = m.group(0)
        return whole[:start] + MARK.format(rule=rule.name) + whole[end:]

    return rule.pattern.sub(cut, text)


def scan(files: Mapping[str, bytes], known: Mapping[str, str] | None = None) -> tuple[dict[str, bytes], list[Hit]]:
    """Every file redacted (text as UTF-8; bytes that are not are kept as replacement
    characters, a support archive is for reading) and the hits, file by file."""
    out: dict[str, bytes] = {}
    hits: list[Hit] = []
    for name, data in files.items():
        text, counts = redact(data.decode("utf-8", errors="replace"), known)
        out[name] = text.encode("utf-8")
        hits += [Hit(name, rule, n) for rule, n in sorted(counts.items())]
    return out, hits

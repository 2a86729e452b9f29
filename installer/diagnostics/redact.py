"""The secret scan every file of a support archive goes through before it is written.

A rules table of our own rather than a scanner library: the scanners (detect-secrets and its
forks) report lines of source code to a reviewer, while here each hit must be cut out of
configuration, environment files and journal lines, and the rules must know this product's own
secrets (`sk-pli-` keys, the Redis password in `requirepass` and in `redis://` URLs, the
scrape token, the URL an Alertmanager receiver posts to). The control machine also knows the
deployment's secrets themselves: any copy of one is cut, as itself, URL-encoded or escaped in a
JSON string (`known`, `forms`).

A hit is replaced by `[REDACTED:<rule>]` and reported as (file, rule, count), never with its
value.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

MARK = "[REDACTED:{rule}]"
_NAMES = (
    r"password|passwd|passphrase|pwd|secret|secret[_-]?key|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credentials?|auth[_-]?key|client[_-]?secret"
    r"|routing[_-]?key|service[_-]?key|integration[_-]?key|webhook[_-]?url"
)
# A value: the whole of a double-quoted one (escapes included), of a single-quoted one, or a
# bare word. Three groups: whichever matched is the secret.
_VALUE = r"""(?:"((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'|((?:\$\{[^}\s]*\}|[^\s"',;}])+))"""
# A config key that names a secret and ends there (`metrics_token_file` is no secret).
_KEY = rf"[A-Za-z0-9_.\-]*(?:{_NAMES})\b"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    groups: tuple[int, ...] = (0,)  # the part of a match that is the secret: the first that matched
    what: str = ""
    # generic rules: a value that is only a reference (`${VAR}`, a file path, null) is kept
    references: bool = False


_GENERIC = ("secret-flag", "secret-assignment", "secret-block")

# Specific rules first: a value they cut is not cut again by the generic ones after them.
RULES: tuple[Rule, ...] = (
    Rule("private-key", re.compile(
        r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK|)-----(.+?)(?:-----END \1PRIVATE KEY\2-----|\Z)", re.S),
         (3,), "a PEM or PGP private key block (RSA, EC, OPENSSH, ENCRYPTED, PGP ... BLOCK)"),
    Rule("pli-api-key", re.compile(r"\bsk-pli-[A-Za-z0-9_\-]{8,}"), (0,), "an API key of this product"),
    Rule("api-key", re.compile(r"\bsk-(?!pli-)(?:[a-z]+-)?[A-Za-z0-9_\-]{20,}"), (0,),
         "an OpenAI-style API key (sk-...)"),
    Rule("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), (0,), "a Hugging Face token"),
    Rule("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), (0,), "a GitHub token"),
    Rule("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), (0,),
         "an AWS access key id"),
    Rule("aws-secret-access-key", re.compile(
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), (1,),
         "an AWS secret access key"),
    Rule("tencent-secret-id", re.compile(r"\bAKID[A-Za-z0-9]{32}\b"), (0,), "a Tencent Cloud SecretId"),
    Rule("tencent-secret-key", re.compile(
        r"(?i)\b(?:tencent_?cloud|tencent|qcloud|tccli)_?secret_?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9]{20,64})\b"),
         (1,), "a Tencent Cloud SecretKey (TENCENTCLOUD_SECRET_KEY=...)"),
    Rule("alibaba-access-key-id", re.compile(r"\bLTAI[A-Za-z0-9]{12,20}\b"), (0,), "an Alibaba Cloud AccessKey id"),
    Rule("alibaba-access-key-secret", re.compile(
        r"(?i)\b(?:alibaba_?cloud|alicloud|aliyun)_?access_?key_?secret\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9]{20,64})\b"),
         (1,), "an Alibaba Cloud AccessKey secret (ALIBABA_CLOUD_ACCESS_KEY_SECRET=...)"),
    Rule("jdcloud-access-key", re.compile(r"\bJDC_[A-Z0-9]{20,40}\b"), (0,), "a JD Cloud AccessKey id"),
    Rule("jdcloud-secret-key", re.compile(
        r"(?i)\bjd_?cloud_?(?:secret_?key|access_?key_?secret)\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9]{20,64})\b"),
         (1,), "a JD Cloud SecretKey (JDCLOUD_SECRET_KEY=...)"),
    Rule("webhook-url", re.compile(
        r"(?i)\bhttps?://(?:hooks\.slack\.com/|events\.pagerduty\.com/|[\w.\-]*\.webhook\.office\.com/"
        r"|outlook\.office\.com/webhook|discord(?:app)?\.com/api/webhooks/|oapi\.dingtalk\.com/robot/"
        r"|qyapi\.weixin\.qq\.com/cgi-bin/webhook/|open\.feishu\.cn/open-apis/bot/|open\.larksuite\.com/open-apis/bot/"
        r")[^\s\"'<>]*"), (0,),
         "a chat or pager webhook URL (Slack, PagerDuty, Teams, Discord, DingTalk, WeCom, Feishu)"),
    Rule("url-password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@"), (1,),
         "the password in a URL (redis://:PASSWORD@host, https://user:PASSWORD@...)"),
    Rule("redis-password", re.compile(rf"(?im)^\s*(?:requirepass|masterauth)[ \t]+{_VALUE}"), (1, 2, 3),
         "Redis's requirepass/masterauth"),
    Rule("authorization-header", re.compile(
        r"(?im)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:[A-Za-z][\w\-]*[ \t]+)?"
        r"([^\s\"'][^\"'\r\n]*?)[ \t]*(?=[\"']|$)"), (1,),
         "an Authorization header's credentials, whatever the scheme (Bearer, Basic, Token, ...)"),
    Rule("bearer-token", re.compile(r"(?i)\b(?:Bearer|Basic|Token)[ \t]+([A-Za-z0-9._~+/\-]{12,}=*)"), (1,),
         "credentials after an Authorization scheme"),
    Rule("secret-flag", re.compile(rf"(?i)--[a-z0-9\-]*(?:{_NAMES})(?:[ \t]*=[ \t]*|[ \t]+){_VALUE}"), (1, 2, 3),
         "a command-line flag that takes a secret (--api-key X, --password=X, --token \"two words\")", True),
    Rule("secret-block", re.compile(
        rf"(?m)^([ \t]*)(?:-[ \t]+)?[\"']?{_KEY}[\"']?[ \t]*:[ \t]*[|>][+\-0-9]*[ \t]*(?:#[^\n]*)?\n"
        r"(?:[ \t]*\n)*\1[ \t]+(\S[^\n]*(?:\n(?:[ \t]*\n)*\1[ \t]+\S[^\n]*)*)"), (2,),
         "a YAML block scalar (key: | or >) with a password/secret/token/key name", True),
    # A line that is only `key: value` or `KEY=value` (YAML, env files): the value runs to the
    # line's end (a YAML comment after ` #`, or pretty-printed JSON's `,`, excepted), spaces and all.
    Rule("secret-assignment", re.compile(
        rf"(?im)^[ \t]*(?:-[ \t]+|export[ \t]+)?[\"']?{_KEY}[\"']?[ \t]*:[ \t]*(?![\"'|>])"
        r"([^\s#][^\n]*?)[ \t]*,?(?:[ \t]#[^\n]*)?$"), (1,), "", True),
    Rule("secret-assignment", re.compile(
        rf"(?im)^[ \t]*(?:export[ \t]+)?{_KEY}[ \t]*=[ \t]*(?![\"'])(\S[^\n]*?)[ \t]*$"), (1,), "", True),
    Rule("secret-assignment", re.compile(rf"(?i)\b{_KEY}[\"']?\s*(?:=|:)[ \t]*{_VALUE}"), (1, 2, 3),
         "key=value or key: value with a password/secret/token/key name (quoted values whole)", True),
)

# Alertmanager's receivers: every URL it posts to is a credential (a Slack or pager webhook
# carries its secret in the path), and so are the keys of its pager integrations.
FILE_RULES: tuple[tuple[re.Pattern[str], Rule], ...] = (
    (re.compile(r"(?:^|/)alertmanager[^/]*\.ya?ml$"), Rule("alertmanager-url", re.compile(
        rf"(?im)^[ \t]*(?:-[ \t]+)?(?:url|api_url|slack_api_url|webhook_url|\w+_url)[ \t]*:[ \t]*{_VALUE}"),
        (1, 2, 3), "a URL an Alertmanager receiver posts to")),
)

# What a generic rule finds that is no secret: empty-ish values, an environment variable's
# name (`${VAR}`, `$UPPER_CASE`), a block scalar's `|` or `>` (secret-block cuts its lines),
# and an absolute path under the usual top folders.
_NOT_SECRET = re.compile(
    r"(?i:null|none|true|false|yes|no|~|\*+|<[^>]*>|\[?REDACTED\S*)|[|>][+\-0-9]*"
    r"|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Z_][A-Z0-9_]*"
    r"|/(?:etc|var|opt|run|usr|srv|home|root|tmp|mnt|data|lib|proc|sys|dev)(?:/[A-Za-z0-9_.@+\-]+)+/?"
)


def forms(value: str) -> set[str]:
    """How a secret turns up in text besides itself: URL-encoded (query strings, URLs) and
    escaped inside a JSON string (`/` as `\\/`, Jinja's tojson `<>&'` as \\u00XX)."""
    escaped = json.dumps(value)[1:-1]
    html = "".join(f"\\u{ord(c):04x}" if c in "<>&'" else c for c in escaped)
    out = {value, escaped, escaped.replace("/", "\\/"), html, html.replace("/", "\\/"),
           urllib.parse.quote(value, safe=""), urllib.parse.quote(value), urllib.parse.quote_plus(value)}
    out |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), v) for v in out}  # %2f as well as %2F
    return {v for v in out if v}


@dataclass(frozen=True)
class Hit:
    file: str
    rule: str
    count: int

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "rule": self.rule, "count": self.count}


def redact(text: str, known: Mapping[str, str] | None = None, path: str = "") -> tuple[str, Counter[str]]:
    """`text` with every secret cut, and how many were cut per rule; `path` (the file's name)
    adds the rules of that kind of file (FILE_RULES)."""
    counts: Counter[str] = Counter()
    for name, value in sorted((known or {}).items()):
        for form in sorted(forms(value), key=len, reverse=True):  # longest first: no form left half-cut
            if form in text:
                counts[f"known-{name}"] += text.count(form)
                text = text.replace(form, MARK.format(rule=f"known-{name}"))
    for match, rule in FILE_RULES:
        if match.search(path):
            text = _apply(rule, text, counts)
    for rule in RULES:
        text = _apply(rule, text, counts)
    return text, counts


def _apply(rule: Rule, text: str, counts: Counter[str]) -> str:
    def cut(m: re.Match[str]) -> str:
        group = next((g for g in rule.groups if m.group(g) is not None), rule.groups[0])
        secret = m.group(group)
        if not secret or "[REDACTED" in secret or (rule.references and _NOT_SECRET.fullmatch(secret)):
            return m.group(0)
        counts[rule.name] += 1
        start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
        whole = m.group(0)
        return whole[:start] + MARK.format(rule=rule.name) + whole[end:]

    return rule.pattern.sub(cut, text)


def scan(files: Mapping[str, bytes], known: Mapping[str, str] | None = None) -> tuple[dict[str, bytes], list[Hit]]:
    """Every file redacted (text as UTF-8; bytes that are not are kept as replacement
    characters, a support archive is for reading) and the hits, file by file."""
    out: dict[str, bytes] = {}
    hits: list[Hit] = []
    for name, data in files.items():
        text, counts = redact(data.decode("utf-8", errors="replace"), known, name)
        out[name] = text.encode("utf-8")
        hits += [Hit(name, rule, n) for rule, n in sorted(counts.items())]
    return out, hits

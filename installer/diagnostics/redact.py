"""The secret scan every file of a support archive goes through before it is written.

A rules table of our own rather than a scanner library: the scanners (detect-secrets and its
forks) report lines of source code to a reviewer, while here each hit must be cut out of
configuration, environment files and journal lines, and the rules must know this product's own
secrets (`sk-pli-` keys, the Redis password in `requirepass` and in `redis://` URLs, the
scrape token, the URL an Alertmanager receiver posts to). The control machine also knows the
deployment's secrets themselves: any copy of one is cut, as itself, URL-encoded or escaped in a
JSON string (`known`, `forms`).

Beside the secrets of known shape, the rules go by class rather than by a list of names: a
name whose last component is password-like (`DB_PASS=`, `--db-pass`, `dbPass:`), a JWT, base64
that holds a private key or sits under a key-like name, a URL's password and its secret or
signature parameters (`sig=`), and the password slots of Redis ACL rules and netrc entries.

A hit is replaced by `[REDACTED:<rule>]` and reported as (file, rule, count), never with its
value.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MARK = "[REDACTED:{rule}]"
# Secret names by the shape of the name, not a list of names: the LAST component of a key,
# variable or flag name (split at `_`, `-`, `.` and camelCase) says what its value is.
# `DB_PASS`, `dbPass`, `--db-pass`, `client_secret`, `AccountKey` name a secret; `metrics_token_file`,
# `--password-file`, `token_count`, `keys_file` name a secret's file or a count, which is kept.
_START = r"(?:(?<![A-Za-z0-9])|(?-i:(?<=[a-z0-9])(?=[A-Z])))"  # a component begins here
_AFTER = r"(?:(?<=[A-Za-z0-9][_.\-])|(?-i:(?<=[a-z0-9])(?=[A-Z])))"  # ... and is not the name's first
_END = r"(?![A-Za-z0-9_.\-])"  # the name ends here
# Short words only as a whole component (`bypass` and `compass` are no secrets); long ones may
# end one (`PGPASSWORD`, `authtoken`); `key` only after another component (`api_key`,
# `routingKey`): a bare `key:` is a Kubernetes selector's or a toleration's.
_SHORT = r"pass|pw|pwd|auth|creds?"
_LONG = (
    r"password|passwd|passphrase|secret|token|credentials?|apikey|accesskey|secretkey|privatekey|authkey"
    r"|webhook[_-]?url"
)
_WORD = rf"(?:{_START}(?:{_SHORT})|(?:{_LONG})|{_AFTER}key){_END}"
# The shell's working directories are no passwords, whatever `pwd` means elsewhere.
_SHELL = rf"(?-i:(?:OLD)?PWD){_END}"
# A name (no groups of its own): `--` or the start of a word before it is the rule's to match.
_NAME = rf"(?!{_SHELL})[A-Za-z0-9_.\-]*?{_WORD}"
_KEY = rf"(?<![A-Za-z0-9_.\-]){_NAME}"
# A value: the whole of a double-quoted one (escapes included), of a single-quoted one, or a
# bare word. Three groups: whichever matched is the secret.
_VALUE = r"""(?:"((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'|((?:\$\{[^}\s]*\}|[^\s"',;}])+))"""
# A name with a key-like component anywhere (`client-key-data`, `private_key_b64`): it holds
# key material when its value is one long run of base64.
_KEYLIKE = (
    rf"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]*?{_START}(?:key|secret|token|pass(?:word|wd)?|credentials?|private)"
    r"(?-i:(?![a-z0-9]))[A-Za-z0-9_.\-]*"
)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    groups: tuple[int, ...] = (0,)  # the part of a match that is the secret: the first that matched
    what: str = ""
    # generic rules: a value that is only a reference (`${VAR}`, a file path, null) is kept
    references: bool = False
    # whether a match is a secret where the pattern alone cannot say (what a blob decodes to,
    # which line a token is on)
    accept: Callable[[re.Match[str]], bool] | None = None


_GENERIC = ("secret-flag", "secret-assignment", "secret-block")


def _decodes_to_private_key(m: re.Match[str]) -> bool:
    """A base64 blob (kubeconfig `client-key-data`, a Kubernetes secret's `tls.key`) holding a PEM
    private key; a certificate's (`client-certificate-data`) is public and kept. A blob cut
    short in a log decodes as far as it goes."""
    blob = m.group(0).rstrip("=").replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(blob[: len(blob) - len(blob) % 4])
    except ValueError:
        return False
    return b"PRIVATE KEY" in data


def _looks_random(m: re.Match[str]) -> bool:
    """Key material rather than a word or a path: base64 of random bytes mixes upper and lower
    case and digits; a hex digest (the hashes keys.json keeps) has no upper case."""
    value = m.group(1)
    return not value.startswith("/") and all(re.search(c, value) for c in ("[A-Z]", "[a-z]", "[0-9]"))


def _line_before(m: re.Match[str]) -> str:
    return m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]


# A Redis ACL rule: `user NAME ...` in redis.conf or an ACL file, `ACL SETUSER NAME ...` in a log.
_ACL_USER = re.compile(r"(?i)(?:^|[\s\"'])(?:acl\s+setuser|user)\s+\S+\s")


def _on_acl_line(m: re.Match[str]) -> bool:
    return _ACL_USER.search(_line_before(m)) is not None


# A netrc entry up to its `password` token (`.netrc`, apt's auth.conf), on one line or several;
# `default` only with a login after it ("the default password for ..." is prose).
_NETRC_ENTRY = re.compile(
    r"(?:^|\s)(?:machine\s+\S+|default(?=\s+(?:login|account)\s))(?:\s+(?:login|account|port|password)\s+\S+)*\s*$"
)


def _in_netrc_entry(m: re.Match[str]) -> bool:
    return _NETRC_ENTRY.search(m.string[max(0, m.start() - 1024):m.start()]) is not None


# Specific rules first: a value they cut is not cut again by the generic ones after them.
RULES: tuple[Rule, ...] = (
    Rule("private-key", re.compile(
        r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK|)-----(.+?)(?:-----END \1PRIVATE KEY\2-----|\Z)", re.S),
         (3,), "a PEM or PGP private key block (RSA, EC, OPENSSH, ENCRYPTED, PGP ... BLOCK)"),
    # base64 of "-----BEGIN": a PEM encoded once more, as kubeconfig and Kubernetes secrets hold it
    Rule("private-key-base64", re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/_\-]*={0,2}"), (0,),
         "a PEM private key in base64 (kubeconfig client-key-data)", accept=_decodes_to_private_key),
    # header.payload.signature, each base64url; the header is JSON, so it begins `eyJ` ({")
    Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"), (0,),
         "a JSON Web Token, wherever it stands"),
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
    # (a scheme starts where its run of scheme characters does: no rescan of a long `a.b.c` run)
    Rule("url-password", re.compile(r"(?<![a-zA-Z0-9+.\-])[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@"), (1,),
         "the password in a URL (redis://:PASSWORD@host, https://user:PASSWORD@...)"),
    # Query and connection-string parameters: a secret name's, and the signatures that are the
    # whole credential of a pre-signed URL (Azure SAS `sig=`, S3 and GCS `X-Amz-Signature=`);
    # `\u0026` is the `&` of a URL in a JSON log line written by Go.
    Rule("secret-param", re.compile(
        rf"(?i)(?:[?&;]|\\u0026)(?:{_NAME}|sig|signature|x-amz-signature|x-goog-signature)=([^&#\s\"'<>;\\]+)"),
         (1,), "a secret query or connection-string parameter (?sig=, &token=, ;AccountKey=)", True),
    Rule("redis-password", re.compile(rf"(?im)^\s*(?:requirepass|masterauth)[ \t]+{_VALUE}"), (1, 2, 3),
         "Redis's requirepass/masterauth"),
    # `>secret` adds a password to an ACL user, `<secret` removes one: both are the clear text
    # (`#<sha256>` is its hash and is kept).
    Rule("redis-acl-password", re.compile(r"(?<=[ \t])[<>](\S+)"), (1,),
         "a password in a Redis ACL rule (user NAME on >secret, ACL SETUSER NAME >secret)", accept=_on_acl_line),
    Rule("netrc-password", re.compile(r"(?<![\w-])password[ \t\r\n]+(\S+)"), (1,),
         "a netrc password (machine HOST login USER password SECRET)", accept=_in_netrc_entry),
    Rule("authorization-header", re.compile(
        r"(?im)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:[A-Za-z][\w\-]*[ \t]+)?"
        r"([^\s\"'][^\"'\r\n]*?)[ \t]*(?=[\"']|$)"), (1,),
         "an Authorization header's credentials, whatever the scheme (Bearer, Basic, Token, ...)"),
    Rule("bearer-token", re.compile(r"(?i)\b(?:Bearer|Basic|Token)[ \t]+([A-Za-z0-9._~+/\-]{12,}=*)"), (1,),
         "credentials after an Authorization scheme"),
    # (a flag right after a secret's name is the next flag, not a value: `--no-auth --port 80`;
    # a name begins with a letter or digit: a ruler of dashes is no run of flags to try)
    Rule("secret-flag", re.compile(rf"(?i)(?<!-)--(?=[a-z0-9]){_NAME}(?:[ \t]*=[ \t]*|[ \t]+)(?!--){_VALUE}"),
         (1, 2, 3), "a command-line flag that takes a secret (--db-pass X, --password=X, --token \"two words\")", True),
    Rule("secret-block", re.compile(
        rf"(?im)^([ \t]*)(?:-[ \t]+)?[\"']?{_KEY}[\"']?[ \t]*:[ \t]*[|>][+\-0-9]*[ \t]*(?:#[^\n]*)?\n"
        r"(?:[ \t]*\n)*\1[ \t]+(\S[^\n]*(?:\n(?:[ \t]*\n)*\1[ \t]+\S[^\n]*)*)"), (2,),
         "a YAML block scalar (key: | or >) with a password/secret/token/key name", True),
    # A line that is only `key: value` or `KEY=value` (YAML, env files): the value runs to the
    # line's end (a YAML comment after ` #`, or pretty-printed JSON's `,`, excepted), spaces and all.
    Rule("secret-assignment", re.compile(
        rf"(?im)^[ \t]*(?:-[ \t]+|export[ \t]+)?[\"']?{_KEY}[\"']?[ \t]*:[ \t]*(?![\"'|>])"
        r"([^\s#][^\n]*?)[ \t]*,?(?:[ \t]#[^\n]*)?$"), (1,), "", True),
    Rule("secret-assignment", re.compile(
        rf"(?im)^[ \t]*(?:export[ \t]+)?{_KEY}[ \t]*=[ \t]*(?![\"'])(\S[^\n]*?)[ \t]*$"), (1,), "", True),
    Rule("secret-assignment", re.compile(rf"(?i){_KEY}[\"']?\s*(?:=|:)[ \t]*{_VALUE}"), (1, 2, 3),
         "key=value or key: value with a password/secret/token/key name (quoted values whole)", True),
    # Last, for what the name rules leave: a key-like name that is not a secret's by its last
    # component (`client-key-data`, `SIGNING_KEY_B64`) with a long base64 value.
    Rule("key-material", re.compile(
        rf"(?i){_KEYLIKE}[\"']?[ \t]*[:=][ \t]*[\"']?([A-Za-z0-9+/_\-]{{32,}}={{0,2}})(?![A-Za-z0-9+/=_\-])"), (1,),
         "long base64 under a key-like name (client-key-data, PRIVATE_KEY_B64)", accept=_looks_random),
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
        if rule.accept is not None and not rule.accept(m):
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

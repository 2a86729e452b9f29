"""The support archive's secret scan (installer/diagnostics/redact.py), data-driven: each file
of tests/unit/fixtures/diagnostics/ holds secrets planted where they turn up on a host (a
config file, an environment file, journal lines, redis.conf, a key), and expected.json says
which rules must report them, what must be gone and what is no secret and must stay."""

import base64
import json
import urllib.parse
from pathlib import Path

import jinja2
import pytest

from installer.diagnostics import redact

FIXTURES = Path(__file__).parent.parent / "fixtures" / "diagnostics"
EXPECTED = {k: v for k, v in json.loads((FIXTURES / "expected.json").read_text()).items() if not k.startswith("_")}
ALERTMANAGER = Path(__file__).parents[3] / "playbooks/roles/monitoring/templates/alertmanager.yml.j2"
REDIS_PASSWORD = "5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_is_cut_and_reported_by_rule(name: str) -> None:
    want = EXPECTED[name]
    text, counts = redact.redact((FIXTURES / name).read_text(), path=name)
    assert dict(counts) == want["hits"]
    for secret in want["gone"]:
        assert secret not in text
    for plain in want["kept"]:
        assert plain in text
    for rule in want["hits"]:
        assert f"[REDACTED:{rule}]" in text


def test_a_secret_the_control_machine_knows_is_cut_in_any_form() -> None:
    # the deployment's Redis password, as requirepass and inside a URL: both reported as known
    for name in ("redis.conf", "gateway.yml"):
        text, counts = redact.redact((FIXTURES / name).read_text(), {"redis-password": REDIS_PASSWORD})
        assert REDIS_PASSWORD not in text and counts["known-redis-password"] == 1
        assert "redis-password" not in counts and "url-password" not in counts
    text, counts = redact.redact(f"a line printed {REDIS_PASSWORD[:40]}... and {REDIS_PASSWORD}",
                                 {"redis-password": REDIS_PASSWORD})
    assert text.endswith("and [REDACTED:known-redis-password]") and counts == {"known-redis-password": 1}


@pytest.mark.parametrize("shown", [
    "{s}", "{q}", "{qp}", "{q_lower}", "{j}", "{j_slash}", "{html}",
])
def test_a_known_secret_is_cut_url_encoded_or_json_escaped(shown: str) -> None:
    secret = "p@ss/w0rd+&'<x> \"q\""
    text = shown.format(
        s=secret, q=urllib.parse.quote(secret, safe=""), qp=urllib.parse.quote_plus(secret),
        q_lower=urllib.parse.quote(secret, safe="").lower(), j=json.dumps(secret)[1:-1],
        j_slash=json.dumps(secret)[1:-1].replace("/", "\\/"),
        html=jinja2.Environment().from_string("{{ v | tojson }}").render(v=secret)[1:-1])
    assert text != secret or shown == "{s}"
    out, counts = redact.redact(f"GET /relay?to={text} failed", {"redis-password": secret})
    assert out == "GET /relay?to=[REDACTED:known-redis-password] failed"
    assert counts == {"known-redis-password": 1}


def test_the_inventory_webhook_url_is_cut_as_alertmanager_renders_it() -> None:
    """The webhook's path is the credential (Slack, PagerDuty): as the monitoring role writes
    alertmanager.yml, it is cut as a known secret, and by the file's own rule when unknown."""
    url = "https://pager.example.internal/v1/hook/9f8e7d6c5b4a?routing=abc&tok=s3cr3t'x"
    rendered = jinja2.Environment().from_string(ALERTMANAGER.read_text()).render(
        monitoring_webhook_url=url, ansible_managed="Ansible managed")
    name = "config/etc/prometheus/alertmanager.yml"
    text, counts = redact.redact(rendered, {"webhook-url": url}, name)
    assert "9f8e7d6c5b4a" not in text and "s3cr3t" not in text and counts == {"known-webhook-url": 1}
    text, counts = redact.redact(rendered, {}, name)
    assert "9f8e7d6c5b4a" not in text and counts == {"alertmanager-url": 1}
    assert 'url: "[REDACTED:alertmanager-url]"' in text and "send_resolved: true" in text
    # a Slack webhook anywhere else (a journal line) has a rule of its own
    text, counts = redact.redact("post to https://hooks.slack.com/services/T0/B0/XXXXxxxx failed: 404")
    assert text == "post to [REDACTED:webhook-url] failed: 404" and counts == {"webhook-url": 1}


def test_scan_reports_file_and_rule_never_the_value() -> None:
    files = {name: (FIXTURES / name).read_bytes() for name in EXPECTED}
    out, hits = redact.scan(files)
    assert set(out) == set(files)
    reported = {(h.file, h.rule): h.count for h in hits}
    assert reported == {(name, rule): n for name, want in EXPECTED.items() for rule, n in want["hits"].items()}
    shown = json.dumps([h.to_json() for h in hits])
    for want in EXPECTED.values():
        assert all(secret not in shown for secret in want["gone"])
    assert all(secret.encode() not in b"".join(out.values()) for w in EXPECTED.values() for secret in w["gone"])


def test_a_clean_file_is_left_byte_for_byte() -> None:
    clean = b"HF_HUB_OFFLINE=1\nmax_tokens: 64\nkeys_file: /etc/private-llm/keys.json\ntoken: null\n"
    out, hits = redact.scan({"engine.env": clean})
    assert out == {"engine.env": clean} and hits == []


# --- issue 40: the secret forms a collect let through, planted beside the ones it already cut,
# in the files where they live on a host -----------------------------------------------------

def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _b64url(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


PEM_KEY = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAplantedKubeClientKey0123456789abcdef\n"
           "-----END RSA PRIVATE KEY-----\n")
CERT = "-----BEGIN CERTIFICATE-----\nMIIC5zCCAc+gAwIBAgIBATANBgkqhkiG9w0BAQsFADAV\n-----END CERTIFICATE-----\n"
JWT = (_b64url({"alg": "RS256", "typ": "JWT"}) + "." + _b64url({"sub": "system:serviceaccount:pli", "exp": 1893456000})
       + ".c2lnbmF0dXJlLW9mLXRoZS10b2tlbi0wMTIzNDU2Nzg5")
SIGNING_KEY_B64 = base64.b64encode(bytes(range(101, 133))).decode()
ACL_HASH = "a3" * 32

# form: the values that must not survive it. The first seven leaked before issue 40.
FORMS = {
    "env DB_PASS=": ("Tr0ub4dor-and-3",),
    "flag --db-pass (value, =value)": ("fl4g-sp4ce-value", "fl4g-equals-value"),
    "kubeconfig client-key-data: base64 PEM, and base64 key material": (_b64(PEM_KEY), SIGNING_KEY_B64),
    "bare JWT": (JWT, JWT.split(".")[1]),
    "Redis ACL >password (ACL file, ACL SETUSER in a log)": ("acl-s3cret-9f3k", "0ps-acl-pass"),
    "Azure SAS sig= and AccountKey=": ("q7%2BzL0aZ3xVd%2FkS9mP1%3D", "Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXg="),
    "netrc password (one line, several)": ("n3trc-one-line", "n3trc-multi-line"),
    "PEM private key": ("MIIEowIBAAKCAQEAplantedPemBody",),
    "sk-pli- API key": ("sk-pli-Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eA",),
    "password in a URL": ("hunter2hunter2",),
    "Redis requirepass": ("5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee",),
    "Hugging Face token": ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",),
    "AWS secret access key": ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",),
    "--api-key flag": ("engine-s3cret-value",),
}
PLANTED = {
    "hosts/h1/config/etc/private-llm/upstream.env": f"""\
# written by hand on h1 to reach the model store
DB_HOST=10.0.0.7
DB_USER=pli
DB_PASS=Tr0ub4dor-and-3
DB_PASSWORD_FILE=/etc/private-llm/db.password
HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789
AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
MODEL_STORE_SIGNING_KEY_B64={SIGNING_KEY_B64}
AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=plimodels;\
AccountKey=Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXg=;EndpointSuffix=core.windows.net
PWD=/home/pli
MAX_TOKENS=4096
""",
    "hosts/h1/config/root/.kube/config": f"""\
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {_b64(CERT)}
    server: https://10.0.0.2:6443
  name: gpu
users:
- name: admin
  user:
    client-certificate-data: {_b64(CERT)}
    client-key-data: {_b64(PEM_KEY)}
""",
    "hosts/h1/config/etc/redis/users.acl": f"""\
user default off
user private-llm on >acl-s3cret-9f3k ~* &* +@all
user metrics on #{ACL_HASH} ~* +info +ping
""",
    "hosts/h1/config/etc/redis/redis.conf": """\
port 0
tls-port 6379
requirepass 5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee
aclfile /etc/redis/users.acl
""",
    "hosts/h1/config/root/.netrc": """\
machine bundles.example.internal login pli password n3trc-one-line
machine mirror.example.internal
    login mirror
    password n3trc-multi-line
""",
    "hosts/h1/config/etc/private-llm/upstream-client.pem": """\
-----BEGIN PRIVATE KEY-----
MIIEowIBAAKCAQEAplantedPemBody
-----END PRIVATE KEY-----
""",
    "hosts/h1/config/etc/private-llm/gateway.yml": """\
keys_file: /etc/private-llm/keys.json
metrics_token_file: /etc/private-llm/metrics.token
limits:
  token_count: 5
  bypass_cache: true
""",
    "hosts/h1/journal/private-llm-gateway.service.log": f"""\
2026-12-01T21:00:02+0000 h1 private-llm-gateway[900]: fetch \
https://plimodels.blob.core.windows.net/weights/model.safetensors?sv=2022-11-02&ss=b&srt=o&sp=r\
&se=2026-12-31T00:00:00Z&spr=https&sig=q7%2BzL0aZ3xVd%2FkS9mP1%3D failed: 403
2026-12-01T21:00:03+0000 h1 private-llm-gateway[900]: upstream rejected session {JWT}: 401
2026-12-01T21:00:04+0000 h1 private-llm-gateway[900]: a client sent Authorization: Bearer \
sk-pli-Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eA
2026-12-01T21:00:05+0000 h1 python[812]: WARNING connect failed: redis://:hunter2hunter2@10.0.0.1:6379 refused
2026-12-01T21:00:06+0000 h1 sync[77]: argv: model-sync --db-user pli --db-pass fl4g-sp4ce-value \
--password-file /etc/private-llm/db.password
2026-12-01T21:00:07+0000 h1 sync[77]: argv: model-sync --db-pass=fl4g-equals-value --token-count 5
2026-12-01T21:00:08+0000 h1 vllm[700]: args: --port 8000 --api-key engine-s3cret-value --max-num-seqs 64
2026-12-01T21:00:09+0000 h1 redis-cli[4]: ACL SETUSER ops on >0ps-acl-pass ~* +@all
""",
}
KEPT = (
    "DB_HOST=10.0.0.7", "DB_USER=pli", "DB_PASSWORD_FILE=/etc/private-llm/db.password", "PWD=/home/pli",
    "MAX_TOKENS=4096", "AccountName=plimodels;", ";EndpointSuffix=core.windows.net",
    f"certificate-authority-data: {_b64(CERT)}", f"client-certificate-data: {_b64(CERT)}",
    "server: https://10.0.0.2:6443", "user default off", f"user metrics on #{ACL_HASH} ~* +info +ping",
    "aclfile /etc/redis/users.acl", "machine bundles.example.internal login pli password ", "    login mirror\n",
    "keys_file: /etc/private-llm/keys.json", "metrics_token_file: /etc/private-llm/metrics.token",
    "token_count: 5", "bypass_cache: true", "&se=2026-12-31T00:00:00Z&spr=https&", "--db-user pli",
    "--password-file /etc/private-llm/db.password", "--token-count 5", "--max-num-seqs 64", ": 401",
)


def test_every_planted_secret_form_is_cut_and_the_non_secrets_beside_them_stay() -> None:
    assert len(FORMS) == 14
    out, hits = redact.scan({name: text.encode() for name, text in PLANTED.items()})
    text = "\n".join(data.decode() for data in out.values())
    assert [(form, v) for form, values in FORMS.items() for v in values if v in text] == []
    assert [plain for plain in KEPT if plain not in text] == []
    # each class of rule had its share, reported by file and rule, never the value
    assert {"secret-assignment", "secret-flag", "private-key-base64", "key-material", "jwt", "redis-acl-password",
            "secret-param", "netrc-password"} <= {h.rule for h in hits}
    shown = json.dumps([h.to_json() for h in hits])
    assert not [v for values in FORMS.values() for v in values if v in shown]


@pytest.mark.parametrize(("name", "secret"), [
    ("DB_PASS", True), ("db-pass", True), ("dbPass", True), ("PGPASSWORD", True), ("MYSQL_PWD", True),
    ("client_secret", True), ("AccountKey", True), ("x-api-key", True), ("REDISCLI_AUTH", True),
    ("sessionToken", True), ("tls.key", True), ("creds", True),
    # a secret's file, a count, a selector's key, a word that only ends like one, the shell's cwd
    ("DB_PASSWORD_FILE", False), ("passwordFile", False), ("metrics_token_file", False), ("token_count", False),
    ("keys_file", False), ("keyfile", False), ("key", False), ("max_tokens", False), ("tokenizer", False),
    ("bypass", False), ("author", False), ("secret_name", False), ("PWD", False), ("OLDPWD", False),
])
def test_a_name_is_a_secrets_by_its_last_component(name: str, secret: bool) -> None:
    # env, JSON, YAML, a flag
    shapes = ("{n}=Zq9-value\n", '{{"{n}": "Zq9-value"}}', "{n}: Zq9-value\n", "run --{n} Zq9-value")
    for line in (shape.format(n=name) for shape in shapes):
        out, _ = redact.redact(line)
        assert ("Zq9-value" not in out) == secret, line


def test_base64_is_judged_by_what_it_holds() -> None:
    """A certificate in base64 is public; a private key is cut, even cut short in a log line;
    a hex digest under a key-like name is a hash, not key material."""
    cert, key = _b64(CERT), _b64(PEM_KEY)
    out, counts = redact.redact(f"client-certificate-data: {cert}\nlogged {key[:60]}... (truncated)\n")
    assert cert in out and key[:60] not in out and counts == {"private-key-base64": 1}
    digest = "0123456789abcdef" * 4
    assert redact.redact(f"key_sha256: {digest}\n") == (f"key_sha256: {digest}\n", {})


def test_prose_around_the_context_rules_is_kept() -> None:
    """netrc's `password X` and Redis ACL's `>X` only count in their own syntax."""
    for line in ("the password was rejected by upstream\n", "using the default password for now\n",
                 "Failed password for invalid user admin from 10.0.0.5 port 22\n", "ratio >0.5 on gpu0\n"):
        assert redact.redact(line) == (line, {})

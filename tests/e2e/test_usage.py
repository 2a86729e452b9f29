"""Usage accounting and quotas on the lab deployment: two keys made and pushed with the real CLI,
requests through both gateways (whole and streamed, two kinds of request), `installer usage`
reporting exactly what the responses' `usage` fields add up to per key and model, then a quota
set on one key refused with a clear 429 by both gateways and shown by `keys list`. The keys are
revoked at the end, so the deployment keeps the keys the other tests expect. Then the lab
inventory's two tenants (#38): each one's limit holds across both gateways, apart from the other's."""

import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.e2e import Run, host_run, installer
from tests.support.lab_tenants import BLUE, RED, RPM, LabTenants

pytestmark = pytest.mark.e2e

MODEL = "tiny-llama"


def _secret(proc) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("sk-pli-"))


@pytest.fixture(scope="module")
def two_keys(deployed: Run, lab_hosts) -> Iterator[dict[str, str]]:
    inventory = str(lab_hosts.inventory_path)
    stamp = int(time.time())
    names = [f"usage-a-{stamp}", f"usage-b-{stamp}"]
    made = {n: _secret(installer("keys", "create", "--name", n, "--inventory", inventory)) for n in names}
    yield made
    for name in names:
        proc = installer("keys", "revoke", name, "--inventory", inventory)
        assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def client(deployed: Run, lab_hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    proc = installer("ca", "export", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stderr
    ca = tmp_path_factory.mktemp("usage") / "ca.pem"
    ca.write_text(proc.stdout)
    with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=120) as c:
        yield c


def _ask(client: httpx.Client, address: str, secret: str, kind: str, stream: bool) -> httpx.Response:
    path, body = (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say something short."}]})
        if kind == "chat" else ("/v1/completions", {"prompt": "Once upon a time"})
    )
    body = {"model": MODEL, "max_tokens": 4, **body}
    if stream:  # asked for, so the client sees the usage the gateway counts
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return client.post(f"https://{address}:8080{path}", json=body, headers={"Authorization": f"Bearer {secret}"})


def _usage(resp: httpx.Response) -> dict[str, int]:
    assert resp.status_code == 200, resp.text
    if resp.headers["content-type"].startswith("application/json"):
        return dict(resp.json()["usage"])
    events = [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]
    return dict(next(e["usage"] for e in events if e.get("usage")))


def _status_edit(was: int, to: int) -> str:
    """A shell command for a gateway host: the first record of today's request audit whose status
    is `was` says `to`, written over the same bytes."""
    return ("f=$(ls /var/lib/private-llm/audit/requests-*.jsonl | tail -1); "
            f"o=$(grep -bo '\"status\":{was},' \"$f\" | head -1 | cut -d: -f1); [ -n \"$o\" ] || exit 1; "
            f"printf '\"status\":{to},' | dd of=\"$f\" bs=1 seek=\"$o\" conv=notrunc status=none")


def test_usage_reports_the_responses_usage_and_a_quota_is_refused_on_both_gateways(
    deployed: Run, lab_hosts, two_keys: dict[str, str], client: httpx.Client, e2e_state: Path
) -> None:
    inventory = str(lab_hosts.inventory_path)
    addresses = [h.address for h in lab_hosts.hosts]
    (a, secret_a), (b, secret_b) = two_keys.items()
    expected: dict[str, list[int]] = {}
    plan = [(secret_a, a, "chat", False), (secret_a, a, "chat", True), (secret_a, a, "text", False),
            (secret_b, b, "chat", True), (secret_b, b, "text", True), (secret_b, b, "chat", False)]
    for n, (secret, name, kind, stream) in enumerate(plan * 2):
        usage = _usage(_ask(client, addresses[n % 2], secret, kind, stream))
        seen = expected.setdefault(name, [0, 0, 0])
        seen[0] += 1
        seen[1] += usage["prompt_tokens"]
        seen[2] += usage["completion_tokens"]

    proc = installer("usage", "--inventory", inventory, "--since", "today", "--by", "key,model", "--json")
    assert proc.returncode == 0, proc.stderr
    got = {
        r["key"]: [r["requests"], r["prompt_tokens"], r["completion_tokens"]]
        for r in json.loads(proc.stdout)["rows"] if r["key"] in two_keys
    }
    assert got == expected
    models = {r["model"] for r in json.loads(proc.stdout)["rows"] if r["key"] in two_keys}
    assert models == {MODEL}
    table = installer("usage", "--inventory", inventory, "--since", "1d")
    assert table.returncode == 0 and a in table.stdout and str(sum(expected[a][1:])) in table.stdout
    assert secret_a not in table.stdout + proc.stdout

    # A quota on an existing key reaches both gateways; one budget, then both refuse.
    quota = 40
    proc = installer("keys", "quota", b, "--quota-tokens", str(quota), "--quota-period", "day",
                     "--inventory", inventory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    time.sleep(3)  # the gateways poll their key file every second
    used, refused = 0, None
    for n in range(20):
        resp = _ask(client, addresses[n % 2], secret_b, "chat", False)
        if resp.status_code == 429:
            refused = resp
            break
        used += sum(_usage(resp)[k] for k in ("prompt_tokens", "completion_tokens"))
    # refused once what is left cannot hold the next prompt (as the gateway estimates it) and a token
    assert refused is not None, f"{used} tokens used and never refused"
    assert used > 0
    for address in addresses:
        resp = _ask(client, address, secret_b, "chat", True)
        assert resp.status_code == 429, resp.text
        error = resp.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert f"Token quota reached for key '{b}': {quota} tokens per day (UTC), {used} used" in error["message"]
        assert "resets at " in error["message"] and "T00:00:00Z" in error["message"]
        assert 0 < int(resp.headers["Retry-After"]) <= 86400
    assert _ask(client, addresses[0], secret_a, "chat", False).status_code == 200  # a's has none

    listing = installer("keys", "list", "--inventory", inventory)
    assert listing.returncode == 0, listing.stderr
    assert f"{used} of {quota}/day" in listing.stdout
    audit = installer("audit", "--json")
    assert audit.returncode == 0, audit.stderr  # the reason, not a JSON error on empty output
    assert any(e["command"] == "keys quota" and b in e["argv"] and e["result"] == "ok"
               for e in json.loads(audit.stdout))

    # The gateways' per-request audit trail (#38): the requests above are chained records on both
    # hosts, never with a prompt; one byte changed in a record on one host is named, by host and
    # line, and the trail is whole again once the byte is back. The byte is changed in place
    # (dd conv=notrunc): the gateway keeps appending to the same file.
    trail = e2e_state / "requests.jsonl"
    ask = ["audit", "--requests", "--inventory", inventory, "--since", "today", "--json"]
    proc = installer(*ask, "--jsonl", str(trail))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert {h["host"] for h in report["hosts"]} == {h.name for h in lab_hosts.hosts}
    assert all(h["records"] > 0 and h["problems"] == [] for h in report["hosts"]), report
    records = [json.loads(line) for line in trail.read_text().splitlines()]
    assert len([r for r in records if r["subject"] == a and r["status"] == 200]) == expected[a][0] + 1
    assert "Say something short." not in trail.read_text() and "Once upon a time" not in trail.read_text()
    host = lab_hosts.hosts[0]
    host_run(lab_hosts, host, _status_edit(200, 201))
    try:
        proc = installer(*ask)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        broken = {h["host"]: h["problems"] for h in json.loads(proc.stdout)["hosts"] if h["problems"]}
        assert list(broken) == [host.name] and "edited" in broken[host.name][0], broken
    finally:
        host_run(lab_hosts, host, _status_edit(201, 200))
    assert installer(*ask).returncode == 0


def _spend(client: httpx.Client, addresses: list[str], bearers: list[str]) -> tuple[int, httpx.Response | None]:
    """Whole completions through both gateways in turn, bearers in turn, until one is refused:
    (answered, the refusal). A bucket refills rpm/60 a second, so a slow answer may let one more in."""
    for n in range(RPM + 3):
        resp = _ask(client, addresses[n % 2], bearers[n % len(bearers)], "text", False)
        if resp.status_code == 429:
            return n, resp
        _usage(resp)
    return RPM + 3, None


def test_two_tenants_limits_hold_separately_across_both_gateways(
    deployed: Run, lab_hosts, lab_tenants: LabTenants, client: httpx.Client
) -> None:
    """The lab inventory's two tenants (tests/support/lab_tenants.py), from the first `up`: each
    tenant's rpm is one budget over both gateways for its token callers and its API key, one
    tenant's spent budget leaves the other's whole, a token of no tenant is a 403 on both
    gateways, and `installer usage --by tenant` reports both."""
    inventory = str(lab_hosts.inventory_path)
    addresses = [h.address for h in lab_hosts.hosts]
    alice, bob = lab_tenants.token("alice", "staff", "red"), lab_tenants.token("bob", "red")
    carol = lab_tenants.token("carol", "blue")

    red_answered, refused = _spend(client, addresses, [alice, bob])
    assert refused is not None and RPM <= red_answered <= RPM + 1, (red_answered, refused)
    assert f"tenant '{RED}'" in refused.json()["error"]["message"], refused.text
    # RED's spent bucket is not BLUE's: its API key and carol share a budget of their own
    blue_answered, refused = _spend(client, addresses, [lab_tenants.key_secret, carol])
    assert refused is not None and RPM <= blue_answered <= RPM + 1, (blue_answered, refused)
    assert f"tenant '{BLUE}'" in refused.json()["error"]["message"], refused.text

    for address in addresses:  # no default tenant: a token whose groups name none is refused
        resp = _ask(client, address, lab_tenants.token("dave", "staff"), "text", False)
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"]["code"] == "no_tenant"

    proc = installer("usage", "--inventory", inventory, "--since", "today", "--by", "tenant", "--json")
    assert proc.returncode == 0, proc.stderr
    got = {r["tenant"]: r["requests"] for r in json.loads(proc.stdout)["rows"] if r["tenant"] in (RED, BLUE)}
    assert got == {RED: red_answered, BLUE: blue_answered}

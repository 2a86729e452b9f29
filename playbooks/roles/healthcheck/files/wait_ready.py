#!/usr/bin/python3
"""Wait until a vLLM engine serves, then prove it with a real chat completion.

Runs on the host (standard library only). Fails fast, with the unit's journal, when systemd
reports the engine failed or restarting again and again, instead of waiting out the timeout.
Prints one JSON line: {"ready_s", "completion_tokens", "latency_ms"}.
"""

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

url, model, timeout_s, unit = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
ca_file, client_cert, client_key = [*sys.argv[5:8], "", "", ""][:3]
CONTEXT = None
if url.startswith("https://"):
    CONTEXT = ssl.create_default_context(cafile=ca_file or None)
    if client_cert:
        CONTEXT.load_cert_chain(client_cert, client_key or None)
# A start that failed twice in a row fails the same way again (a bad flag, a model that does
# not fit); one failure may be a passing one, so a single restart is waited for.
MAX_RESTARTS = 1


def unit_state() -> dict[str, str]:
    out = subprocess.run(
        ["systemctl", "show", "-p", "ActiveState,NRestarts", unit],
        capture_output=True, text=True, check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def give_up(reason: str) -> None:
    journal = subprocess.run(
        ["journalctl", "-u", unit, "-n", "25", "--no-pager", "-o", "cat"],
        capture_output=True, text=True, check=False,
    ).stdout
    print(f"{reason}\n--- last journal lines of {unit} ---\n{journal}", file=sys.stderr)
    sys.exit(1)


def get_json(path: str, body: dict | None = None, timeout: float = 5) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout, context=CONTEXT) as resp:
        return json.load(resp)


start = time.monotonic()
restarts0 = int(unit_state().get("NRestarts", "0") or 0)
while True:
    try:
        ids = [m["id"] for m in get_json("/v1/models").get("data", [])]
        if model in ids:
            break
    except (OSError, urllib.error.URLError, ValueError):
        pass
    state = unit_state()
    restarts = int(state.get("NRestarts", "0") or 0) - restarts0
    if state.get("ActiveState") == "failed" or restarts > MAX_RESTARTS:
        give_up(f"{unit} is {state.get('ActiveState')} after {restarts} restart(s)")
    if time.monotonic() - start > timeout_s:
        give_up(f"{unit} did not list model {model!r} within {timeout_s:.0f} s")
    time.sleep(1)

ready_s = time.monotonic() - start
t0 = time.monotonic()
try:
    chat = get_json(
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        timeout=120,
    )
except (OSError, urllib.error.URLError, ValueError) as exc:
    give_up(f"the engine listed {model!r} but a chat completion failed: {exc}")
if not chat.get("choices"):
    give_up(f"the chat completion returned no choices: {json.dumps(chat)[:300]}")
print(json.dumps({
    "ready_s": round(ready_s, 1),
    "completion_tokens": chat.get("usage", {}).get("completion_tokens"),
    "latency_ms": round((time.monotonic() - t0) * 1000, 1),
}))

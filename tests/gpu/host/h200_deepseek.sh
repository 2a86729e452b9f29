#!/usr/bin/env bash
# On the GPU machine after h200_up.sh served the DeepSeek checkpoint (same lease): what a user
# calls, through the gateway with a key (a forced named tool call and reasoning, each whole and
# streamed), then the benchmark with MTP on (h200_bench.sh: restart to ready, concurrency 8 and
# 64, gateway and direct, the spec-decode counters), then `installer up` with `mtp_tokens: 0`
# (a warm restart of the engine through the product) and the same benchmark with MTP off.
# MTP_ON_ONLY=1: the calls and the MTP-on bench alone; MTP_OFF_ONLY=1: the `up` with
# `mtp_tokens: 0` and its bench alone, from INV (default h200.yml: the inventory deployed last, so
# that nothing else changes between the two benches).
#   [MTP_ON_ONLY=1 | MTP_OFF_ONLY=1 [INV=h200_fast.yml]] bash tests/gpu/host/h200_deepseek.sh STASH OUT
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=${2:?OUT}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/root/ctl/bin:$PATH INSTALLER_STATE_DIR=/root/pli-state PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$S/site"
if [ -z "${MTP_OFF_ONLY:-}" ]; then
installer ca export -i h200.yml > "$out/ca.pem"
key=$(installer keys create --name "calls-$(date +%s)" -i h200.yml 2>&1 | grep -o 'sk-pli-[A-Za-z0-9_-]*' | head -1)
[ -n "$key" ] || { echo "no key"; exit 2; }
SSL_CERT_FILE="$out/ca.pem" KEY="$key" python3 - "$out" <<'PY' 2>&1 | tee "$out/calls.txt"
import json, os, ssl, sys, urllib.request
out = sys.argv[1]
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
def ask(name, body):
    req = urllib.request.Request("https://127.0.0.1:8080/v1/chat/completions", json.dumps(body).encode(),
                                 {"Authorization": f"Bearer {os.environ['KEY']}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120, context=ctx) as r:
        text = r.read().decode()
    open(f"{out}/{name}.txt", "w").write(text)
    return text
tool = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False}}}
forced = {"model": "tiny-deepseek", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [tool],
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 192}
whole = json.loads(ask("tool_whole", forced))
call = whole["choices"][0]["message"]["tool_calls"][0]["function"]
print("tool call whole:", call["name"], json.loads(call["arguments"]))
streamed = ask("tool_stream", {**forced, "stream": True})
deltas = [json.loads(l[6:]) for l in streamed.splitlines() if l.startswith("data: {")]
args = "".join(tc["function"].get("arguments") or "" for d in deltas for c in d["choices"]
               for tc in (c.get("delta", {}).get("tool_calls") or []))
print("tool call streamed: arguments", json.loads(args))
think = {"model": "tiny-deepseek", "messages": [{"role": "user", "content": "Why is the sky blue?"}],
         "max_tokens": 48, "chat_template_kwargs": {"thinking": True}}
msg = json.loads(ask("reasoning_whole", think))["choices"][0]["message"]
field = "reasoning" if msg.get("reasoning") else "reasoning_content"
print(f"reasoning whole: {field} {len(msg.get(field) or '')} chars, content {len(msg.get('content') or '')} chars")
streamed = ask("reasoning_stream", {**think, "stream": True})
got = sum(len(c.get("delta", {}).get("reasoning") or c.get("delta", {}).get("reasoning_content") or "")
          for l in streamed.splitlines() if l.startswith("data: {") for c in json.loads(l[6:])["choices"])
print(f"reasoning streamed: {got} chars of reasoning deltas")
PY
echo "calls exit ${PIPESTATUS[0]}"
[ -z "${CALLS_ONLY:-}" ] || exit 0  # the calls alone, for the last minutes of a lease
bash "$here/h200_bench.sh" "$S" "$out/mtp_on"
# MTP_ON_ONLY=1: the calls and the MTP-on bench alone, for a lease with little device time left
[ -z "${MTP_ON_ONLY:-}" ] || exit 0
fi
INV=${INV:-h200.yml} python3 - <<'PY'
import os, yaml
inv = yaml.safe_load(open(os.environ["INV"]))
inv["model"]["mtp_tokens"] = 0
yaml.safe_dump(inv, open("h200_mtp0.yml", "w"), sort_keys=False)
PY
t=$(date +%s)
installer up -i h200_mtp0.yml --bundle /root/bundle.tar --trusted-key ./bundle-signing.pub > "$out/up_mtp0.log" 2>&1
echo "up with mtp_tokens 0 exit $? in $(( $(date +%s) - t )) s: $(tail -2 "$out/up_mtp0.log" | tr '\n' ' ')" | tee "$out/up_mtp0.txt"
sleep 6
bash "$here/h200_bench.sh" "$S" "$out/mtp_off"

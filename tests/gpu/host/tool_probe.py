"""On the GPU machine beside a served DeepSeek checkpoint: why a forced tool call has no tool call.
The rendered prompt's end, the same grammar on that prompt through /v1/completions, and the forced
call with thinking off, on, `required`, and without maxLength.   python3 tool_probe.py"""
import json
import urllib.error
import urllib.request


def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:8000/" + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return {"error": e.code, "body": e.read().decode()[:800]}


params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
          "required": ["city"], "additionalProperties": False}
tool = {"type": "function",
        "function": {"name": "get_weather", "description": "the weather in a city", "parameters": params}}
msgs = [{"role": "user", "content": "Weather in Paris?"}]
base = {"model": "tiny-deepseek", "messages": msgs, "tools": [tool], "max_tokens": 64, "temperature": 0}
forced = {**base, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
tok = post("tokenize", {"model": "tiny-deepseek", "messages": msgs, "tools": [tool], "add_generation_prompt": True})
ids = tok.get("tokens", [])
print("prompt tokens", len(ids), "tail ids", ids[-12:], tok if not ids else "")
det = post("detokenize", {"model": "tiny-deepseek", "tokens": ids})
print("prompt text tail:", repr(str(det.get("prompt", det))[-400:]))
c = post("v1/completions", {"model": "tiny-deepseek", "prompt": ids, "max_tokens": 64, "temperature": 0,
                            "structured_outputs": {"json": params}})
print("completion+json on the tool prompt:", repr(c.get("choices", [{}])[0].get("text", c)))
loose_params = {"type": "object", "properties": {"city": {"type": "string"}}}
loose = {**tool, "function": {**tool["function"], "parameters": loose_params}}
for name, body in [("forced", forced),
                   ("forced thinking false", {**forced, "chat_template_kwargs": {"thinking": False}}),
                   ("forced thinking true", {**forced, "chat_template_kwargs": {"thinking": True}}),
                   ("required", {**base, "tool_choice": "required"}),
                   ("forced loose schema", {**forced, "tools": [loose]})]:
    r = post("v1/chat/completions", body)
    ch = r.get("choices", [{}])[0]
    print(name, "->", repr(ch.get("message", r))[:600], ch.get("finish_reason"))

"""Run inside a lab host's network namespace: one chat completion, non-streaming and streaming,
with the official openai client. Prints a JSON line with what it saw."""

import json
import sys

from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key=sys.argv[3] if len(sys.argv) > 3 else "unused", max_retries=0)
messages = [{"role": "user", "content": "Hello there, who are you?"}]
full = client.chat.completions.create(model=model, messages=messages, max_tokens=12)
chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=12, stream=True))
print(json.dumps({
    "model": full.model,
    "finish_reason": full.choices[0].finish_reason,
    "completion_tokens": full.usage.completion_tokens,
    "stream_chunks": len(chunks),
    "stream_text": "".join((c.choices[0].delta.content or "") for c in chunks if c.choices),
}))

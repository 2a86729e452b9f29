"""One chat completion, non-streaming and streaming, with the official openai client. Prints a
JSON line with what it saw.

    chat_client.py BASE_URL MODEL [API_KEY]
Environment: PLI_CA_FILE (CA bundle for https://), PLI_CLIENT_CERT / PLI_CLIENT_KEY (a client
certificate, which engines on a network address require).
"""

import json
import os
import ssl
import sys

import httpx
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
verify: ssl.SSLContext | bool = True
if os.environ.get("PLI_CA_FILE"):
    verify = ssl.create_default_context(cafile=os.environ["PLI_CA_FILE"])
    if os.environ.get("PLI_CLIENT_CERT"):
        verify.load_cert_chain(os.environ["PLI_CLIENT_CERT"], os.environ["PLI_CLIENT_KEY"])
client = OpenAI(base_url=base_url, api_key=sys.argv[3] if len(sys.argv) > 3 else "unused", max_retries=0,
                http_client=httpx.Client(verify=verify))
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

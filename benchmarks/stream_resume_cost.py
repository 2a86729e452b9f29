"""CPU per relayed event of what mid-stream failover adds (service/stream_resume.py): recording
a resumable stream's chunk and taking the gateway's per-chunk usage out of it, against the scan
every streamed block already gets (proxy.py's _OUTPUT and _FINISH), on one vLLM-shaped chat chunk.

    .venv/bin/python benchmarks/stream_resume_cost.py
"""

import json
import timeit

from service.proxy import _FINISH, _OUTPUT
from service.stream_resume import StreamResume

CHUNK = {
    "id": "chatcmpl-0123456789abcdef0123456789abcdef", "object": "chat.completion.chunk", "created": 1765000000,
    "model": "deepseek-r1-7b", "choices": [{"index": 0, "delta": {"content": " token"}, "logprobs": None,
                                            "finish_reason": None}],
    "usage": {"prompt_tokens": 412, "total_tokens": 520, "completion_tokens": 108},
}
BLOCK = b"data: " + json.dumps(CHUNK, separators=(",", ":")).encode() + b"\n\n"
N = 200_000


def main() -> None:
    state = StreamResume("/v1/chat/completions", None, client_continuous=False)
    scan = min(timeit.repeat(lambda: (_OUTPUT.search(BLOCK), _FINISH.findall(BLOCK)), number=N, repeat=5)) / N
    observe = min(timeit.repeat(lambda: state.observe(BLOCK), number=N // 10, repeat=5)) / (N // 10)
    state.text.clear()
    print(f"scan every block gets: {scan * 1e6:.2f} us/event")
    print(f"stream_resume observe (parse, record, usage out): {observe * 1e6:.2f} us/event")


if __name__ == "__main__":
    main()

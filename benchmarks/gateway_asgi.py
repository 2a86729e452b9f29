"""The gateway's app, for serving it with an ASGI server other than its own start path.

    PLI_GATEWAY_CONFIG=gateway.yaml python -m granian --interface asgi --factory \
        --working-dir benchmarks gateway_asgi:build
    PLI_GATEWAY_CONFIG=gateway.yaml python -m uvicorn --factory --app-dir benchmarks gateway_asgi:build

The same app as `python -m service` serves (service/app.create_app), with one worker's limits
and none of service/__main__.py's server: no connection guards, no drain, no socket
activation. benchmarks/gateway_overhead.py runs it to compare servers under the gateway.
"""

import gc
import sys
from pathlib import Path

from fastapi import FastAPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service.app import create_app
from service.config import load_settings


def build() -> FastAPI:
    app = create_app(load_settings())
    # As service/__main__.serve does: the loaded libraries' objects out of every collection.
    gc.collect()
    gc.freeze()
    return app

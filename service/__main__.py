"""`python -m service`: the gateway under uvicorn (uvloop, httptools), with a graceful drain.

On SIGTERM (or Ctrl-C) the gateway first drains: /readyz turns 503 so load balancers stop
sending, new API requests get 503, and requests in flight (streams included) run to their end
or to `drain_timeout_s`. Only then does uvicorn stop. A second signal exits at once.

Under systemd socket activation (service/activation.py) there is a better way: the process
stops accepting at once, so new connections wait in the socket's queue for the next process
instead of getting a 503, and the streams in flight finish (up to `drain_timeout_s`).

With `workers: N > 1`, service/prefork.py forks N such servers on one socket. Only the
configuration is read here before that: the app, uvicorn and prometheus_client are imported
in each worker after the fork (prometheus_client must see PROMETHEUS_MULTIPROC_DIR first).
"""

import gc
import logging
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING

from service.activation import inherited_socket
from service.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    import socket

    from service.shared import SharedState

log = logging.getLogger("service")


def serve(settings: Settings, sock: "socket.socket | None", shared: "SharedState | None" = None) -> None:
    """One gateway process (or one worker of several) until it is told to stop."""
    import uvicorn

    from service.app import create_app
    from service.connections import guarded_protocol
    from service.state import Gateway

    class DrainingServer(uvicorn.Server):
        def __init__(self, config: uvicorn.Config, gateway: Gateway, activated: bool = False) -> None:
            super().__init__(config)
            self.gateway = gateway
            self.activated = activated
            self.drain_deadline: float | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.activated:
                # uvicorn's own shutdown: stop accepting, close idle connections, let requests in
                # flight finish within timeout_graceful_shutdown (= drain_timeout_s).
                super().handle_exit(sig, frame)
                return
            if self.drain_deadline is not None:  # a second signal: stop now
                super().handle_exit(sig, frame)
                self.force_exit = True
                return
            self._captured_signals.append(sig)  # uvicorn re-raises it after shutting down
            self.gateway.admission.draining = True
            self.drain_deadline = time.monotonic() + self.gateway.settings.drain_timeout_s
            log.info("draining: %d request(s) in flight", self.gateway.admission.in_flight)

        async def on_tick(self, counter: int) -> bool:
            if await super().on_tick(counter):
                return True
            if self.drain_deadline is None:
                return False
            in_flight = self.gateway.admission.in_flight
            if in_flight and time.monotonic() < self.drain_deadline:
                return False
            if in_flight:
                log.warning("drain timeout: cutting %d request(s)", in_flight)
            return True

    try:
        app = create_app(settings, shared)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"pli-gateway: {exc}", file=sys.stderr)
        sys.exit(2)
    limits = settings.limits
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools with a deadline and a size cap on request heads and a per-address cap, and
        # TLS done by that protocol: counted and under the deadline from the accept, in every
        # start path (our port, systemd's socket, the workers'), so uvicorn serves plain TCP.
        # Our own SSLContext, so that renewed certificates are loaded into the live context
        # (service/tls.py) and the TLS settings are ours.
        http=guarded_protocol(
            limits.header_timeout_s, limits.max_connections_per_client, app.state.gateway.server_ssl
        ),
        ws="none",  # no WebSocket routes: an upgrade is refused, not handed to another protocol
        timeout_keep_alive=limits.keepalive_timeout_s,
        lifespan="on",
        access_log=False,  # ours is the JSON one
        server_header=False,
        # The gateway is the edge: X-Forwarded-For from a client must not be believed.
        proxy_headers=False,
        # What is left after the drain gets this long to finish before it is cut; with socket
        # activation uvicorn's shutdown is the drain.
        timeout_graceful_shutdown=int(settings.drain_timeout_s) if sock else 1,
        log_config=None,
    )
    config.load()
    # The ~80k objects of the loaded libraries would make every full collection a ~40 ms
    # pause (measured), a p99 spike in the middle of some stream; frozen, they are skipped.
    gc.collect()
    gc.freeze()
    # A socket from outside (systemd's, or the supervisor's for its workers) outlives this process.
    DrainingServer(config, app.state.gateway, activated=sock is not None).run(sockets=[sock] if sock else None)


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_settings()
    except (ConfigError, OSError, ValueError) as exc:
        print(f"pli-gateway: {exc}", file=sys.stderr)
        sys.exit(2)
    sock = inherited_socket()
    if settings.workers == 1:
        serve(settings, sock)
        return
    from service.prefork import Supervisor, listening_socket, prepare_metrics_dir

    metrics_dir = prepare_metrics_dir()
    from service.shared import SharedState

    if sock is None:
        sock = listening_socket(settings.host, settings.port)
    shared = SharedState(settings.workers, [e.name for e in settings.engines], metrics_dir / "limits.lock")
    sys.exit(Supervisor(settings.workers, shared, lambda _index: serve(settings, sock, shared)).run())


if __name__ == "__main__":
    main()

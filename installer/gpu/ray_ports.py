"""The ports of a Ray node as the `private-llm-ray` units start it (installer/planning/engines.py ray_node).

Ray picks most of its ports at random unless told. The units pin every one, so that the
deployment's own ports are checked against them before any host changes
(installer/planning/ray_checks.py), preflight can find them taken on a host
(installer/preflight/ray_cluster.py), and a firewall between the hosts can name them
(docs/multinode.md). Standard library only: the tuner and the engines both read it.
"""

from __future__ import annotations

from dataclasses import dataclass

UNIT = "private-llm-ray"  # the systemd unit of a Ray head or worker
# Not Ray's default 6379: the gateways' Redis (ports.redis) listens there by default.
GCS_PORT = 6390
NODE_MANAGER_PORT = 6391
OBJECT_MANAGER_PORT = 6392
RUNTIME_ENV_AGENT_PORT = 6393
DASHBOARD_AGENT_GRPC_PORT = 6394
DASHBOARD_AGENT_LISTEN_PORT = 6395
METRICS_EXPORT_PORT = 6396
# Ray's own defaults, written out so the check and the firewall see them: the client server
# (head only) and the range Ray hands its worker processes (vLLM's GPU workers among them).
CLIENT_SERVER_PORT = 10001
MIN_WORKER_PORT, MAX_WORKER_PORT = 10002, 19999
# The head's autoscaler monitor serves its metrics on 0.0.0.0 at Ray's AUTOSCALER_METRIC_PORT
# (an environment variable, no `ray start` flag), seen listening in the lab (docs/multinode.md).
AUTOSCALER_METRIC_PORT = 44217


@dataclass(frozen=True)
class RayPort:
    low: int
    high: int  # == low for a single port
    what: str
    flag: str  # `ray start` option ("" for the worker range, written as two flags)
    head_only: bool = False

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high

    @property
    def text(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


PORTS: tuple[RayPort, ...] = (
    RayPort(GCS_PORT, GCS_PORT, "Ray's GCS (workers join the head there)", "--port", head_only=True),
    RayPort(CLIENT_SERVER_PORT, CLIENT_SERVER_PORT, "Ray's client server", "--ray-client-server-port",
            head_only=True),
    RayPort(NODE_MANAGER_PORT, NODE_MANAGER_PORT, "Ray's node manager", "--node-manager-port"),
    RayPort(OBJECT_MANAGER_PORT, OBJECT_MANAGER_PORT, "Ray's object manager", "--object-manager-port"),
    RayPort(RUNTIME_ENV_AGENT_PORT, RUNTIME_ENV_AGENT_PORT, "Ray's runtime-env agent", "--runtime-env-agent-port"),
    RayPort(DASHBOARD_AGENT_GRPC_PORT, DASHBOARD_AGENT_GRPC_PORT, "Ray's dashboard agent (gRPC)",
            "--dashboard-agent-grpc-port"),
    RayPort(DASHBOARD_AGENT_LISTEN_PORT, DASHBOARD_AGENT_LISTEN_PORT, "Ray's dashboard agent (HTTP)",
            "--dashboard-agent-listen-port"),
    RayPort(METRICS_EXPORT_PORT, METRICS_EXPORT_PORT, "Ray's metrics export", "--metrics-export-port"),
    RayPort(MIN_WORKER_PORT, MAX_WORKER_PORT, "Ray's worker processes", ""),
    RayPort(AUTOSCALER_METRIC_PORT, AUTOSCALER_METRIC_PORT, "Ray's autoscaler metrics", "", head_only=True),
)


def ports(role: str) -> tuple[RayPort, ...]:
    """The ports a Ray node of this role ("head" or "worker") listens on."""
    return tuple(p for p in PORTS if role == "head" or not p.head_only)


def flags(role: str) -> tuple[str, ...]:
    """The `ray start` options that pin them (the head's --port is written by its caller)."""
    out: list[str] = []
    for p in ports(role):
        if p.flag == "--port":
            continue
        if p.flag:
            out.append(f"{p.flag}={p.low}")
        elif p.low == MIN_WORKER_PORT:
            out += [f"--min-worker-port={p.low}", f"--max-worker-port={p.high}"]
        # else the autoscaler's: Ray's default, set by no flag
    return tuple(out)


def firewall_text() -> str:
    """`6390-6396 and 10001-19999`: what hosts of one Ray cluster must reach on each other."""
    return f"{GCS_PORT}-{METRICS_EXPORT_PORT} and {CLIENT_SERVER_PORT}-{MAX_WORKER_PORT}"


def port_of(port: int, role: str = "head") -> RayPort | None:
    """The Ray port (or range) `port` falls in, for a node of `role`."""
    return next((p for p in ports(role) if port in p), None)

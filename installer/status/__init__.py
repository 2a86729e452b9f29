"""`installer status`: one row per host and engine, with columns filled by collectors.

A collector (model.Collector) declares the columns it fills and fills them for every row; the
built-in ones read the inventory and the last deploy (model, release), each gateway's /readyz
(ready), the gateway hosts' addresses (vip: who holds the frontend's
virtual IP), the TLS certificates sent to the hosts (cert: days left) and Prometheus (traffic,
latency, KV cache, GPU memory) and, for a model spanning hosts, its Ray cluster's members over SSH
(ray). Other modules add columns by appending a collector to
COLLECTORS (or passing their own list to `collect`). The default table shows the columns marked
`brief`, in 100 columns; `--wide` and `--json` show them all.
"""

from installer.status.cert import CertCollector
from installer.status.deployment import DeploymentCollector
from installer.status.frontend import FrontendCollector
from installer.status.live import ReadinessCollector
from installer.status.model import Collector, Column, Context, Row, StatusReport, collect
from installer.status.prometheus import PrometheusCollector
from installer.status.ray import RayCollector
from installer.status.release import ReleaseCollector

COLLECTORS: list[Collector] = [
    DeploymentCollector(), ReleaseCollector(), ReadinessCollector(), FrontendCollector(), CertCollector(),
    PrometheusCollector(), RayCollector(),
]

__all__ = [
    "COLLECTORS",
    "CertCollector",
    "Collector",
    "Column",
    "Context",
    "DeploymentCollector",
    "FrontendCollector",
    "PrometheusCollector",
    "RayCollector",
    "ReadinessCollector",
    "Row",
    "StatusReport",
    "collect",
]

"""The secrets a deployment's hosts share, generated and kept on the control machine: the
password of its Redis (shared per-key limits and usage), the scrape token Prometheus shows
the gateways for their metrics (service/scrape_auth.py), and, for a model spanning hosts, the
token of its Ray cluster (RAY_AUTH_MODE=token: Ray refuses a node or driver without it).

`prepare(plan)` is the one step that makes them, before anything is rendered: the renderer and
the flows after it only read. Each is generated once (32 random bytes as hex: safe inside a
redis:// URL), 0600 under the state directory; hosts get them inside 0640 files written by
no_log tasks, read by Ansible with a file lookup so they never land in a run directory.
"""

import secrets
from pathlib import Path

from installer.base.errors import InstallerError
from installer.base.files import write_private
from installer.base.paths import state_dir
from installer.planning.plan import DeploymentPlan


def redis_password_file(deployment: str) -> Path:
    return state_dir() / "redis" / f"{deployment}.password"


def metrics_token_file(deployment: str, folder: Path | None = None) -> Path:
    """`folder`: the state folder when the caller looked it up without making it (status)."""
    return (folder or state_dir()) / "metrics" / f"{deployment}.token"


def ray_token_file(deployment: str) -> Path:
    return state_dir() / "ray" / f"{deployment}.token"


def fanout_token_file(deployment: str) -> Path:
    """The weights fan-out's token (model.distribute: fanout): the hosts' servers ask it of each
    fetcher, beside the client certificate (installer/weights/serve.py)."""
    return state_dir() / "weights" / f"{deployment}.fanout.token"


def _has_fanout(plan: DeploymentPlan) -> bool:
    return any(m.model.distribute == "fanout" for m in plan.inventory.served_models())


def _has_ray(plan: DeploymentPlan) -> bool:
    return any(h.ray is not None for h in plan.hosts)


def _ensure(path: Path) -> Path:
    if not path.is_file():
        write_private(path, secrets.token_hex(32))
    return path


def prepare(plan: DeploymentPlan) -> None:
    """Make every secret `plan` needs that this machine does not hold yet (never replaces one:
    the hosts and their clients hold it). A plan with no Redis makes no Redis password."""
    deployment = plan.inventory.deployment
    _ensure(metrics_token_file(deployment))
    if plan.redis is not None:
        _ensure(redis_password_file(deployment))
    if _has_ray(plan):
        _ensure(ray_token_file(deployment))
    if _has_fanout(plan):
        _ensure(fanout_token_file(deployment))


def require(plan: DeploymentPlan) -> None:
    """Raise when a secret `plan` needs was not made: the renderer reads, it never writes one."""
    deployment = plan.inventory.deployment
    needed = [metrics_token_file(deployment), *([redis_password_file(deployment)] if plan.redis else []),
              *([ray_token_file(deployment)] if _has_ray(plan) else []),
              *([fanout_token_file(deployment)] if _has_fanout(plan) else [])]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise InstallerError(f"deployment {deployment}'s secrets are not made yet: {', '.join(missing)}",
                             ["the flow calls secret_files.prepare(plan) before rendering"])

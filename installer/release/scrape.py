"""Every gateway's /metrics, read from the control machine with the scrape token, over HTTPS
verified against the deployment's CA (as `installer up` proves the gateways)."""

import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from installer.day2 import drain
from installer.hosts import prove, remote
from installer.inventory import Host, Inventory
from installer.release import metrics
from installer.release.state import ReleaseError
from installer.secrets import secret_files


@dataclass(frozen=True)
class Scrape:
    """One round: the stage series of each gateway that answered, and why the others did not."""

    at: float
    gateways: dict[str, metrics.Samples]
    problems: dict[str, str] = field(default_factory=dict)


def token(inv: Inventory) -> str:
    path = secret_files.metrics_token_file(inv.deployment)
    if not path.is_file():
        raise ReleaseError(f"no scrape token at {path} to read the gateways' metrics with",
                           ["it is made by `installer up`: run it from this deployment's state folder"])
    return path.read_text().strip()


def _one(inv: Inventory, host: Host, secret: str, ctx: ssl.SSLContext | None, timeout_s: float) -> str:
    req = urllib.request.Request(f"{prove.gateway_base(inv, host.address)}/metrics",
                                 headers={"Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:
        return resp.read().decode()


def scrape(inv: Inventory, at: float, timeout_s: float = 10) -> Scrape:
    """Every serving host's gateway at once; one that fails is named, never counted as zero."""
    secret = token(inv)
    ca = prove.ca_file(inv)
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    hosts = drain.serving(inv)

    def one(host: Host) -> tuple[str, metrics.Samples | str]:
        try:
            return host.name, metrics.parse(_one(inv, host, secret, ctx, timeout_s))
        except urllib.error.HTTPError as exc:
            return host.name, f"/metrics answered HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            base = prove.gateway_base(inv, host.address)
            return host.name, prove.tls_problem(exc, base, ca) or f"gateway unreachable: {exc}"

    answers = dict(remote.each(hosts, one))
    return Scrape(
        at,
        {h: a for h, a in answers.items() if not isinstance(a, str)},
        {h: a for h, a in answers.items() if isinstance(a, str)},
    )

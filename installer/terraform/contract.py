"""The host contract every provider module outputs, read back into inventory hosts.

`terraform output -json` of any module gives `contract_version` and `hosts`, a list of
{name, public_address, private_address, ssh_user, gpu_type, gpu_count}: one parser for all.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from installer.inventory import Host
from installer.inventory.hosts import HostSSH
from installer.terraform.errors import TerraformError

CONTRACT_VERSION = 1
FIELDS = ("name", "public_address", "private_address", "ssh_user", "gpu_type", "gpu_count")


@dataclass(frozen=True)
class ProvisionedHost:
    name: str
    public_address: str | None
    private_address: str | None
    ssh_user: str | None
    gpu_type: str | None
    gpu_count: int | None


def _value(outputs: dict[str, Any], name: str) -> Any:
    if name not in outputs:
        raise TerraformError(
            f"terraform outputs lack {name!r}; the module does not follow the host contract",
            [f"outputs present: {', '.join(sorted(outputs)) or 'none'}"],
        )
    return outputs[name].get("value") if isinstance(outputs[name], dict) else outputs[name]


def _optional_str(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return None if value in (None, "") else str(value)


def parse(outputs: dict[str, Any]) -> list[ProvisionedHost]:
    """Hosts from `terraform output -json`; TerraformError names any entry breaking the contract."""
    if not outputs:
        return []  # nothing applied yet: a state with no outputs at all
    version = _value(outputs, "contract_version")
    if version != CONTRACT_VERSION:
        raise TerraformError(
            f"host contract version {version!r} is not {CONTRACT_VERSION}; "
            "the module and this installer do not match"
        )
    raw_hosts = _value(outputs, "hosts")
    if not isinstance(raw_hosts, list):
        raise TerraformError(f"output 'hosts' must be a list, not {type(raw_hosts).__name__}")
    hosts, problems = [], []
    for i, raw in enumerate(raw_hosts):
        missing = [k for k in FIELDS if not isinstance(raw, dict) or k not in raw]
        if missing:
            problems.append(f"hosts[{i}]: missing {', '.join(missing)}")
            continue
        count = raw["gpu_count"]
        if count is not None and (
            not isinstance(count, int | float) or count < 0 or count != int(count)
        ):
            problems.append(f"hosts[{i}].gpu_count: {count!r} is not a whole number")
            continue
        if not raw["name"] or not (raw["public_address"] or raw["private_address"]):
            problems.append(f"hosts[{i}]: needs a name and at least one address")
            continue
        hosts.append(
            ProvisionedHost(
                name=str(raw["name"]),
                public_address=_optional_str(raw, "public_address"),
                private_address=_optional_str(raw, "private_address"),
                ssh_user=_optional_str(raw, "ssh_user"),
                gpu_type=_optional_str(raw, "gpu_type"),
                gpu_count=None if count is None else int(count),
            )
        )
    if problems:
        raise TerraformError("terraform outputs break the host contract", problems)
    return hosts


def to_inventory_hosts(hosts: list[ProvisionedHost], *, public: bool) -> list[Host]:
    """Inventory hosts, reached over the public address when they have one, else the private."""
    out = []
    for h in hosts:
        address = (h.public_address if public else None) or h.private_address or h.public_address
        try:
            out.append(Host(name=h.name, address=str(address), ssh=HostSSH(user=h.ssh_user)))
        except ValidationError as exc:
            errors = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
            raise TerraformError(
                f"provisioned host {h.name!r} is not a valid inventory host", errors
            ) from exc
    return out

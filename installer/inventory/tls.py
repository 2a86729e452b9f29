"""The `tls:` section: how the gateways' and engines' certificates are issued or provided."""

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from installer.inventory.fields import LocalPath, Strict, matching


class HostCertificate(Strict):
    """A certificate the user brings for one host, with its private key (PEM files)."""

    cert: LocalPath
    key: LocalPath


class TLS(Strict):
    """HTTPS for the gateways and TLS between gateways and engines on other hosts.

    `issue` (default): the installer keeps a deployment CA on the control machine and issues
    each host's certificate. `provided`: the user's own CA and per-host certificates; nothing
    is issued. `off`: plain HTTP, so API keys and prompts cross the network readable by anyone
    on it; only for a network you trust completely, and only when asked for by name.
    """

    mode: Literal["issue", "provided", "off"] = "issue"
    # An extra DNS name in every host's certificate (a load balancer's or DNS round-robin name).
    service_name: Annotated[str, matching(
        r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", "a DNS name such as llm.example.internal"
    )] | None = None
    cert_days: Annotated[int, Field(ge=2, le=825)] = 365
    # `installer up` re-issues a certificate that expires within this many days.
    renew_before_days: Annotated[int, Field(ge=1, le=365)] = 30
    ca: LocalPath | None = None
    certificates: dict[str, HostCertificate] = Field(default_factory=dict)

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @model_validator(mode="after")
    def _consistent(self) -> "TLS":
        if self.renew_before_days >= self.cert_days:
            raise ValueError(
                f"renew_before_days ({self.renew_before_days}) must be less than cert_days "
                f"({self.cert_days}), or every run would re-issue"
            )
        if self.mode == "provided":
            if self.ca is None or not self.certificates:
                raise ValueError(
                    "mode provided needs `ca` (your CA certificate) and `certificates` "
                    "(host name: {cert, key}); or use mode issue to let the installer issue them"
                )
        elif self.ca is not None or self.certificates:
            raise ValueError(f"ca and certificates are for mode provided, not mode {self.mode}")
        return self

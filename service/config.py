"""Gateway settings: a YAML or JSON file named by $PLI_GATEWAY_CONFIG, overridable by
PLI_GATEWAY_* environment variables (nested with `__`). Unknown keys and unsafe combinations
are errors, so a typo never silently becomes a default."""

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from service.audit_retain import BUILTIN, pattern_problem

CONFIG_ENV = "PLI_GATEWAY_CONFIG"
Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


class ConfigError(Exception):
    """The gateway's configuration is missing, malformed or unsafe."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str = Field(
        pattern=r"^https?://[^/\s]+$", description="base URL, no path: http://host:port"
    )
    model: str = Field(min_length=1, description="served model name the engine answers to")
    task: Literal["generate", "embed", "score"] = "generate"
    # Engines of one model in two stages run two revisions of it side by side (a gray release,
    # service/stages.py): the stages file splits the model's traffic between them.
    stage: str = Field(default="stable", pattern=r"^[a-z][a-z0-9-]{0,31}$")
    # The engine's context (--max-model-len): a max_tokens the gateway sets for a request that
    # set none (a quota's cap) stays within it, or vLLM would refuse the request (400).
    max_model_len: int | None = Field(default=None, ge=1)
    # A stream this engine's model breaks off after its first byte goes on from another engine of
    # the model and stage (service/stream_resume.py); false on any of the model's engines: never.
    resume_streams: bool = True
    # The model's serving profile (installer/inventory/profiles.py), which says how an answer with
    # reasoning goes on from another engine (service/resume_families.py); none: such answers are
    # not resumed. The engines of a model that disagree count as none.
    resume_family: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")


class LimitsConfig(_Strict):
    max_in_flight: int = Field(default=256, ge=1, description="global cap; 503 above it")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, description="413 above it")
    # Client connections (service/connections.py): a stalled or idle client is closed after
    # these, and one address holds at most this many connections per gateway worker process.
    header_timeout_s: Seconds = Field(
        default=10.0, description="until a request's headers are in, from the accept (TLS included) or its first byte"
    )
    body_timeout_s: Seconds = Field(default=30.0, description="until its whole body is in; 408")
    # After a grace, a body slower than this on average is given up (408): a key trickling
    # bodies would otherwise hold its slots for the whole body_timeout_s.
    min_body_bytes_per_s: float = Field(default=16384, ge=0, description="0: no minimum rate")
    body_rate_grace_s: Seconds = 5.0
    # Bodies are held in memory while their requests run (and parsed, and re-encoded): the sum
    # of their sizes is bounded, 503 above it; split between workers like max_in_flight (each
    # worker's share at least max_body_bytes), one key holding at most a quarter of a share.
    max_body_bytes_in_flight: int = Field(default=128 * 1024 * 1024, ge=1024)
    # One key's requests in flight on this gateway (split between workers); 429 above it,
    # before the body is read. None: three quarters of max_in_flight (the others keep a quarter).
    max_in_flight_per_key: int | None = Field(default=None, ge=1)
    # Longer than the 5 s after which httpx (the openai client) drops an idle pooled connection,
    # so that clients give a connection up before the gateway closes it, never at the same time.
    keepalive_timeout_s: int = Field(default=8, ge=1, description="idle between two requests")
    # Above max_in_flight: one address (a NAT, a load balancer, a benchmark) may use every slot.
    max_connections_per_client: int = Field(default=512, ge=1, description="429 and closed above it")
    connect_timeout_s: Seconds = 3.0
    # Waiting for the upstream's response headers, and between two chunks of a stream: a long
    # generation is fine as long as tokens keep coming.
    upstream_timeout_s: Seconds = 600.0
    # Tokens reserved for the completion when a request sets no max_tokens; reconciled with
    # the real usage when the response ends.
    default_completion_reserve: int = Field(default=1024, ge=1)
    redis_url: str | None = Field(
        default=None, description="share per-key limits across gateways (redis://host:port/db)"
    )
    # When Redis cannot be reached: admit requests without their limits and quotas (open), or
    # refuse those that have one with 503 (closed). Either way counted and alerted.
    redis_on_unavailable: Literal["open", "closed"] = "open"
    # Sentinels ("host:port") that name the current primary of `redis_master`: with them the
    # gateway follows a failover (service/redis_connect.py); redis_url then gives the password,
    # the db and rediss:// (its host is only the first primary's). Empty: redis_url's host alone.
    redis_sentinels: list[Annotated[str, Field(pattern=r"^(\[[0-9a-fA-F:]+\]|[^:\s\[\]]+):[0-9]{1,5}$")]] = Field(
        default_factory=list
    )
    redis_master: str = Field(default="pli", pattern=r"^[A-Za-z0-9_.-]{1,64}$")

    @model_validator(mode="after")
    def _sentinels_need_url(self) -> "LimitsConfig":
        if self.redis_sentinels and self.redis_url is None:
            raise ValueError("redis_sentinels need redis_url (its password, db and scheme)")
        return self


class EvidenceConfig(_Strict):
    """One key's attempts on a (model, stage) count in a release's figures while it has fewer
    than max(per_key_floor, per_key_share x the window's) in the current window."""

    window_s: Seconds = 60.0
    per_key_floor: int = Field(default=20, ge=1)
    per_key_share: float = Field(default=0.25, gt=0, le=1)


class TLSConfig(_Strict):
    """PEM files; the installer puts them in /etc/private-llm/tls/."""

    certfile: Path = Field(description="this host's certificate (served, and shown to engines)")
    keyfile: Path
    ca_file: Path = Field(description="the deployment CA: https:// engines must chain to it")
    reload_interval_s: Seconds = Field(default=10.0, description="how often renewed files are looked for")


class TracingConfig(_Strict):
    """Spans of relayed requests, exported over OTLP/HTTP (service/tracing.py)."""

    # The collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: spans are posted to <it>/v1/traces.
    # No credentials in it: the URL is in the config file and the engines' command lines.
    otlp_endpoint: str = Field(pattern=r"^https?://[^/\s@?#]+(/[^\s?#]*)?$")
    service_name: str = Field(default="private-llm-gateway", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    # Requests without a client's traceparent are sampled at this ratio; a client's flag is followed.
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    # Spans waiting for export; a full queue drops new spans rather than wait (never a request).
    max_queue_size: int = Field(default=2048, ge=1, le=1_000_000)
    schedule_delay_s: Seconds = 1.0
    export_timeout_s: Seconds = 10.0


JWTAlgorithm = Literal["RS256", "ES256", "EdDSA"]
JWT_ALGORITHMS: tuple[JWTAlgorithm, ...] = ("RS256", "ES256", "EdDSA")


class JWTConfig(_Strict):
    """Bearer JWTs from the organisation's identity provider, beside API keys (service/jwt_auth.py)."""

    issuers: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(min_length=1)
    audiences: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(min_length=1)
    # Asymmetric only (service/jwks.py says why): never none, never HS*.
    algorithms: list[JWTAlgorithm] = Field(default_factory=lambda: list(JWT_ALGORITHMS), min_length=1)
    clock_skew_s: float = Field(default=60, ge=0, le=300, description="leeway on exp, nbf and iat")
    jwks_file: Path | None = None
    jwks_url: str | None = Field(default=None, pattern=r"^https://[^/\s@?#]+(/[^\s#]*)?$")
    # None: the system's trust store; else the CA bundle the IdP's certificate chains to.
    jwks_ca_file: Path | None = None
    jwks_refresh_s: Seconds = Field(default=300, le=86_400)
    # An unknown kid fetches the set again at once, at most this often.
    jwks_min_refresh_interval_s: Seconds = Field(default=30, le=3600)
    jwks_fetch_timeout_s: Seconds = Field(default=5, le=60)
    max_token_bytes: int = Field(default=8192, ge=1024, le=65536, description="401 above it, before parsing")

    @model_validator(mode="after")
    def _one_source(self) -> "JWTConfig":
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwks_file and jwks_url")
        if self.jwks_ca_file is not None and self.jwks_url is None:
            raise ValueError("jwks_ca_file goes with jwks_url")
        return self


TENANT_NAME = r"^[a-z0-9][a-z0-9_.-]{0,39}$"


class TenantConfig(_Strict):
    """A named policy its callers share (service/tenants.py): across every gateway through Redis."""

    name: str = Field(pattern=TENANT_NAME)
    models: list[str] = Field(default_factory=list)  # empty: every model
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    quota_tokens: int | None = Field(default=None, ge=1)
    quota_period: Literal["day", "month"] | None = None
    # The claim values (a group's name, say) that put a token's caller in it; empty: its name.
    claim_values: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)  # API key names it holds

    @model_validator(mode="after")
    def _quota_pair(self) -> "TenantConfig":
        if (self.quota_tokens is None) != (self.quota_period is None):
            raise ValueError(f"tenant {self.name}: quota_tokens and quota_period go together")
        return self


class TenantsConfig(_Strict):
    # The token claim that names a caller's tenant: a string or a list of strings (groups).
    claim: str = Field(default="groups", min_length=1, max_length=128)
    # A token whose claim names no tenant gets this one; None: it is refused (403).
    default: str | None = None
    tenants: list[TenantConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "TenantsConfig":
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names must be unique: {names}")
        if self.default is not None and self.default not in names:
            raise ValueError(f"default tenant {self.default!r} is not one of {names}")
        keys = [k for t in self.tenants for k in t.keys]
        if len(set(keys)) != len(keys):
            raise ValueError("an API key is in one tenant at most")
        return self


class RedactionConfig(_Strict):
    """An operator's redaction: matches become `[redacted:<name>]` (service/audit_retain.py)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    pattern: str = Field(min_length=1, max_length=1000)

    @field_validator("pattern")
    @classmethod
    def _usable(cls, value: str) -> str:
        problem = pattern_problem(value)
        if problem:
            raise ValueError(f"the pattern {problem}")
        return value


class RetainConfig(_Strict):
    """The prompts and answers the audit trail keeps, redacted (service/audit_retain.py); the
    inventory's audit.retain."""

    prompts: bool = False
    answers: bool = False
    # built-in names (service/audit_retain.py's BUILTIN) and the operator's patterns, in order
    redact: list[str | RedactionConfig] = Field(default_factory=lambda: list[str | RedactionConfig](BUILTIN))
    max_chars: int = Field(default=16_384, ge=1, le=1 << 16, description="each of prompt and answer")

    @model_validator(mode="after")
    def _known(self) -> "RetainConfig":
        for item in self.redact:
            if isinstance(item, str) and item not in BUILTIN:
                raise ValueError(f"unknown redaction {item!r}: built-in ones are {sorted(BUILTIN)}")
        return self


class RequestAuditConfig(_Strict):
    """The per-request audit trail (service/request_audit.py): its folder and how long it keeps."""

    dir: Path
    retention_days: int = Field(default=365, ge=0, le=36_500, description="0: never removed")
    # Once today's file is this big, refusals are counted, not recorded one by one (docs/audit.md).
    max_bytes_per_day: int = Field(default=1 << 30, ge=0, description="0: no cap")
    # None: never the prompt or the answer (docs/audit.md#keeping-prompts-and-answers)
    retain: RetainConfig | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PLI_GATEWAY_", env_nested_delimiter="__", extra="forbid"
    )

    host: str = "127.0.0.1"
    port: Port = 8080
    engines: list[EngineConfig] = Field(min_length=1)
    keys_file: Path | None = None
    allow_anonymous: bool = Field(default=False, description="serve without API keys (tests, labs)")
    limits: LimitsConfig = LimitsConfig()
    drain_timeout_s: Seconds = 30.0
    # Processes serving the port (service/prefork.py): one event loop relays a few thousand
    # streamed tokens a second, a host of several GPUs makes far more.
    workers: int = Field(default=1, ge=1, le=64)
    # Engines the operator took out of rotation (service/drain.py); None: never drained.
    drain_file: Path | None = None
    health_interval_s: Seconds = 5.0
    # An idle engine in rotation is asked for a real token this often, and /health in between
    # (service/health.py says why); at most health_interval_s makes every check a real request.
    health_deep_interval_s: Seconds = 30.0
    # Every attempt's first byte (a whole answer's first byte is its end): past it, the
    # attempt is given up and retried on another engine, as nothing was sent yet. Canaries
    # have their own, shorter ones below.
    first_byte_timeout_s: Seconds = 60.0
    answer_timeout_s: Seconds = 300.0
    # An engine with streamed requests waiting for their first byte and none of its requests
    # making progress (a stream's event, an answer) for this long is wedged: out of rotation until a
    # real request passes, and the waiting requests are retried elsewhere at once.
    engine_stall_s: Seconds = 30.0  # shorter than first_byte_timeout_s: found before each deadline
    # Which attempts count in a release's figures (service/evidence.py).
    release_evidence: EvidenceConfig = EvidenceConfig()
    # Each model's traffic split between its engines' stages (service/stages.py); None: every
    # request goes to the stable engines (a canary is reached only through stage_header).
    stages_file: Path | None = None
    stage_header: str = Field(
        default="X-Release-Stage", description="header that sends a request to a named stage"
    )
    # A streamed canary answer with no first byte by then is given up and retried on stable.
    canary_first_byte_timeout_s: Seconds = 10.0
    # A whole (not streamed) canary answer's first byte is its end: its own, longer deadline.
    canary_answer_timeout_s: Seconds = 120.0
    # Metrics name every API key: /metrics and /metrics/engines/* answer only Prometheus's
    # bearer token (service/scrape_auth.py), read from this file; None: not served at all.
    metrics_token_file: Path | None = None
    # The gateway's /metrics on an address of its own instead of the API port (no engine relay
    # there); an address other than loopback needs metrics_token_file.
    metrics_host: str | None = None
    metrics_port: Port | None = None
    docs: bool = Field(default=False, description="serve /docs, /redoc and /openapi.json")
    session_header: str | None = Field(
        default=None, description="header whose value pins a client session to one engine"
    )
    access_log: Path | None = Field(default=None, description="JSON-lines file; None: stdout")
    log_prompts: bool = Field(default=False, description="debug only: prompts in the access log")
    tls: TLSConfig | None = Field(default=None, description="None: plain HTTP in and out")
    tracing: TracingConfig | None = Field(default=None, description="None: no spans, no SDK loaded")
    # Bearer JWTs accepted beside the API keys of keys_file; None: API keys only.
    jwt: JWTConfig | None = None
    # Tenants: policies chosen by a token's claim or given to API keys; None: none.
    tenants: TenantsConfig | None = None
    # One hash-chained record per request on this host; None: none kept.
    request_audit: RequestAuditConfig | None = None

    @field_validator("session_header", "stage_header")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value

    @model_validator(mode="after")
    def _safe(self) -> "Settings":
        if self.keys_file is None and not self.allow_anonymous:
            raise ValueError(
                "keys_file is required (set allow_anonymous: true to serve without keys)"
            )
        if self.jwt is not None and self.keys_file is None:
            raise ValueError("jwt needs keys_file: an anonymous gateway checks no credential at all")
        if self.tenants is not None and self.keys_file is None:
            raise ValueError("tenants need keys_file: an anonymous gateway knows no caller")
        # Refused, not warned (as a key's quota is, in service/app.py): a tenant's quota is set in
        # this same file, and without Redis the gateway has no ledger, so it would be silently
        # unenforced. (`installer up` always gives gateways Redis: this is for hand-written files.)
        quota = [t.name for t in self.tenants.tenants if t.quota_tokens] if self.tenants else []
        if quota and self.limits.redis_url is None:
            raise ValueError(
                f"tenant(s) {', '.join(quota)} have a token quota, which is kept in Redis: set "
                "limits.redis_url, or remove their quota_tokens and quota_period"
            )
        if self.keys_file is not None and self.allow_anonymous:
            raise ValueError("set either keys_file or allow_anonymous, not both")
        if (self.metrics_host is None) != (self.metrics_port is None):
            raise ValueError("metrics_host and metrics_port go together")
        if self.metrics_host and self.metrics_token_file is None and not _loopback(self.metrics_host):
            raise ValueError(
                f"metrics_host {self.metrics_host} is not a loopback address: set metrics_token_file "
                "so that other hosts need the scrape token, or use 127.0.0.1"
            )
        if self.tls is None and any(e.url.startswith("https://") for e in self.engines):
            raise ValueError("https:// engines need the tls section (ca_file to verify them)")
        names = [e.name for e in self.engines]
        if len(set(names)) != len(names):
            raise ValueError(f"engine names must be unique: {names}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get(CONFIG_ENV)
        if path:
            if path.endswith((".yaml", ".yml")):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            else:
                sources.append(JsonConfigSettingsSource(settings_cls, json_file=path))
        return tuple(sources)


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost may resolve anywhere
        return False


def load_settings() -> Settings:
    """Settings from the environment, or ConfigError with one line per problem."""
    path = os.environ.get(CONFIG_ENV)
    if path and not Path(path).is_file():
        raise ConfigError(f"{CONFIG_ENV}={path}: no such file")
    try:
        return Settings()  # type: ignore[call-arg]
    except ValidationError as exc:
        where = path or "environment"
        lines = [f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(f"invalid gateway config ({where}): " + "; ".join(lines)) from exc
    except ValueError as exc:  # a file that is not valid YAML/JSON
        raise ConfigError(f"cannot read gateway config {path}: {exc}") from exc

"""The whole inventory document (class Inventory): its sections, each typed in its own module
of installer/inventory/ (fields.py says what they share), and the checks across them that
pydantic runs as it validates (the one model form, `models:` against the hosts).

Paths are resolved against the inventory file's directory by the loader (`_resolve`), so
models only check shape; the loader checks that the paths exist, and the checks across
sections and of what the named files hold (certificates, tarballs), which `validate` and `up`
both run, are installer/preparation/inventory_checks.py.
"""

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from installer.inventory.audit import Audit
from installer.inventory.auth import Auth
from installer.inventory.cloud import CLOUD_MODELS, CloudSettings
from installer.inventory.engine import Engine, ModelEngine
from installer.inventory.fields import Name, Strict, unset_dropped
from installer.inventory.frontend import Frontend
from installer.inventory.gateway import Gateway, Ports, RedisSettings
from installer.inventory.gpu_stack import GPUStack
from installer.inventory.hosts import Host, OSSettings, SSHSettings
from installer.inventory.monitoring import Monitoring
from installer.inventory.served import Model, ModelEntry, ServedModel
from installer.inventory.source import Loc, Source, dotted
from installer.inventory.tls import TLS


class Inventory(Strict):
    deployment: Name
    # baremetal: the hosts are listed below. Cloud providers: Terraform creates them from `cloud`.
    provider: Literal["baremetal", "aws", "tencentcloud", "jdcloud"] = "baremetal"
    cloud: CloudSettings | None = Field(None, validate_default=True)
    ssh: SSHSettings = SSHSettings()
    hosts: list[Host] = Field(None, validate_default=True)  # type: ignore[assignment]
    # One model (`model:`), or several (`models:`, the first the primary); exactly one of the two.
    # With `models:`, `model` and `engine` are the primary's (its engine merged over `engine:`),
    # so code about "the model" keeps meaning the primary; served_models() has them all.
    model: Model = Field(None)  # type: ignore[assignment]  # with models: set by _primary
    models: Annotated[list[ModelEntry], Field(min_length=1)] | None = None
    engine: Engine = Engine()
    gpu: GPUStack = GPUStack()
    ports: Ports = Ports()
    gateway: Gateway = Gateway()
    tls: TLS = TLS()
    auth: Auth = Auth()
    audit: Audit = Audit()
    redis: RedisSettings = RedisSettings()
    frontend: Frontend | None = None  # a virtual IP for clients (inventory/frontend.py)
    monitoring: Monitoring = Monitoring()
    os: OSSettings = OSSettings()
    # The file it was loaded from, with the line of every key (set by the loader).
    _source: Source | None = PrivateAttr(default=None)
    # With `models:`, the top-level `engine:` as written (`engine` is then the primary's merge).
    _engine_defaults: Engine | None = PrivateAttr(default=None)

    def where(self, *loc: str | int) -> str:
        """`file:line: key.path` of a setting for a message about it (just the key path when
        this inventory was not read from a file)."""
        path: Loc = loc
        return self._source.at(path) if self._source else dotted(path)

    def line(self, *loc: str | int) -> int | None:
        """The line of a setting in the inventory file; None when not read from a file."""
        path: Loc = loc
        return self._source.line(path) if self._source else None

    @field_validator("cloud", mode="before")
    @classmethod
    def _cloud_for_provider(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("provider")
        if provider is None:
            return None  # the provider itself is wrong; that error is the one to read
        model = CLOUD_MODELS.get(provider)
        if model is None:
            if value is not None:
                raise ValueError(
                    f"provider {provider} takes no cloud section; remove it or pick a cloud one"
                )
            return None
        if value is None:
            raise PydanticCustomError(
                "missing", "Field required (provider {provider} creates hosts from this section)",
                {"provider": provider},
            )
        # Validated here so errors carry the right model's field names (and their file:line).
        cloud = value if isinstance(value, model) else model.model_validate(value)
        # The cloud modules start every resource and host name with it (their name_prefix).
        name = info.data.get("deployment")
        if name is not None and len(name) > 40:
            raise ValueError(
                f"provider {provider} starts every resource and host name with the deployment "
                f"name, which allows at most 40 characters; shorten deployment {name!r} ({len(name)})"
            )
        return cloud

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts_for_provider(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("provider", "baremetal")
        if value is None:
            if provider == "baremetal":
                raise PydanticCustomError("missing", "Field required")
            return []
        if provider != "baremetal" and value:
            raise ValueError(
                f"provider {provider} creates its hosts with Terraform; remove hosts "
                "(or use provider: baremetal for machines that exist)"
            )
        return value

    @field_validator("hosts")
    @classmethod
    def _some_hosts(cls, value: list[Host], info: ValidationInfo) -> list[Host]:
        if info.data.get("provider", "baremetal") == "baremetal" and not value:
            raise PydanticCustomError(
                "too_short", "List should have at least 1 item after validation, not 0"
            )
        return value

    @field_validator("models")
    @classmethod
    def _models_agree(cls, value: list[ModelEntry] | None, info: ValidationInfo) -> list[ModelEntry] | None:
        if value is None:
            return value
        provider = info.data.get("provider", "baremetal")
        hosts = info.data.get("hosts")
        problem = next(_model_problems(value, provider, hosts), None)
        if problem is not None:
            loc, message = problem
            raise PydanticCustomError("models", "{message}", {"message": message, "loc": loc})
        return value

    @model_validator(mode="after")
    def _primary(self) -> "Inventory":
        # After the fields, so that errors in them are reported first (the loader reports both
        # forms with their lines before validating).
        both = self.model is not None and self.models is not None
        if both or (self.model is None and self.models is None):
            loc: Loc = ("models",) if both else ()
            raise PydanticCustomError("model_form", "{message}", {"message": MODEL_FORM[both], "loc": loc})
        if self.models is not None and self._engine_defaults is None:
            for i, m in enumerate(self.models):
                _check_merged_engine(i, m.engine, self.engine)
            self._engine_defaults = self.engine
            # frozen: set once here, as validation finishes
            object.__setattr__(self, "model", self.models[0].model)
            object.__setattr__(self, "engine", self.models[0].engine.over(self.engine))
        problem = _fanout_problem(self)
        if problem is not None:
            raise PydanticCustomError("distribute", "{message}", {"message": problem[1], "loc": problem[0]})
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        """As written: one model form, and `engine` the top-level one (a revision's snapshot is
        loaded again); a single-model inventory dumps as before `models:` existed, so its
        revision's config digest stays what it was."""
        data: dict[str, Any] = handler(self)
        if data.get("auth") == {"jwt": None}:  # as before `auth` existed: an inventory without it keeps its digest
            data.pop("auth", None)
        unset_dropped(self, data, ("audit", "redis", "frontend"))
        if self.models is None:
            data.pop("models", None)
        else:
            data.pop("model", None)
            if "engine" in data and self._engine_defaults is not None:
                data["engine"] = self._engine_defaults.model_dump(
                    mode="json" if info.mode_is_json() else "python", exclude_unset=info.exclude_unset
                )
        return data

    def served_models(self) -> tuple[ServedModel, ...]:
        """Every model this deployment serves, the primary first; a single `model:` is one named
        `main` that generates, on every serving host."""
        serving = tuple(h.name for h in self.hosts if "serving" in self.host_groups(h))
        if self.models is None:
            return (ServedModel("main", self.model, "generate", self.engine, serving),)
        defaults = self._engine_defaults or self.engine
        return tuple(
            ServedModel(
                m.name, m.model, m.task, self.engine if i == 0 else m.engine.over(defaults),
                serving if m.hosts is None else tuple(h for h in serving if h in m.hosts), m.release,
            )
            for i, m in enumerate(self.models)
        )

    def host_groups(self, host: Host) -> list[str]:
        """A host's Ansible groups; with no host in `monitoring`, the first host is in it too."""
        if host is self.hosts[0] and not any("monitoring" in h.groups for h in self.hosts):
            return [*host.groups, "monitoring"]
        return list(host.groups)

    def host_target(self, host: Host) -> str:
        """The OS release (bundle target) of a host: its own, else the deployment's."""
        return host.target or self.os.target

    def targets(self) -> list[str]:
        """Every target this inventory's hosts run, sorted (cloud hosts: the deployment's)."""
        return sorted({self.host_target(h) for h in self.hosts} or {self.os.target})

    def host_ssh(self, host: Host) -> tuple[str, int, Path | None]:
        """Effective (user, port, private key) for a host: its overrides, else the defaults."""
        return (
            host.ssh.user or self.ssh.user,
            host.ssh.port or self.ssh.port,
            host.ssh.private_key or self.ssh.private_key,
        )


MODEL_FORM = {
    True: "both model: and models: are given; keep one (models: is a list of entries like model:, "
          "each with a name and a task)",
    False: "no model: or models:; add one (model: {path, served_name}, or models: a list of "
           "{name, served_name, path, task})",
}


def _fanout_problem(inv: "Inventory") -> tuple[Loc, str] | None:
    """distribute: fanout needs the deployment's CA (the hosts serve each other over mutual
    TLS with their own certificates), and one set of hosts for every model fanned out (one
    fan-out, one port per host: installer/weights/fanout.py)."""
    fanned = [(i, m) for i, m in enumerate(inv.served_models()) if m.model.distribute == "fanout"]
    if not fanned:
        return None
    where = [("model", "distribute") if inv.models is None else ("models", i, "distribute") for i, _ in fanned]
    if inv.tls.mode == "off":
        return where[0], ("distribute: fanout needs tls (the hosts serve each other the weights over mutual TLS "
                          "with their deployment certificates); set tls.mode issue or provided, or distribute: push")
    first = fanned[0][1]
    named = [h.name for h in inv.hosts if h.name in first.hosts and not _is_ip(h.address)]
    if named:
        return where[0], (f"distribute: fanout binds each host's server to its address, which must be an IP "
                          f"address ({', '.join(named)} given by name); write the hosts' addresses as IPs")
    for loc, (_, m) in zip(where, fanned, strict=True):
        if m.hosts != first.hosts:
            return loc, (f"distribute: fanout for models on different hosts ({m.name}: {', '.join(m.hosts)}; "
                         f"{first.name}: {', '.join(first.hosts)}) is not built; fan out only models served "
                         "by the same hosts, and push the others")
    return None


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _check_merged_engine(i: int, own: ModelEngine, defaults: Engine) -> None:
    """models[i]'s engine with the top level's settings as a whole (host_torch needs a GPU,
    cpu_inline_worker a CPU and nobind), reported at the override that makes it wrong."""
    try:
        own.over(defaults)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        named = [k for k in sorted(own.model_fields_set) if k in message]
        loc: Loc = ("models", i, "engine", named[0]) if named else ("models", i, "engine")
        raise PydanticCustomError("model_engine", "{message}", {"message": message, "loc": loc}) from None


def _model_problems(
    models: list[ModelEntry], provider: str, hosts: list[Host] | None
) -> Iterator[tuple[Loc, str]]:
    """(where, what is wrong) for `models:` entries that contradict each other or the hosts."""
    for attr in ("name", "served_name"):
        seen: dict[str, int] = {}
        for i, m in enumerate(models):
            value = getattr(m, attr)
            if value in seen:
                yield (("models", i, attr),
                       f"duplicate {attr} {value!r} (also models[{seen[value]}]); every model needs its own {attr}")
            seen.setdefault(value, i)
    if models[0].task != "generate":
        yield (("models", 0, "task"),
               f"the first model is the primary one, which the health checks and `installer prove` chat "
               f"with; it has task {models[0].task}: put a generate model first")
    groups = {h.name: h.groups for h in hosts or []}
    for i, m in enumerate(models):
        if m.name == "canary" or m.name.endswith("-canary"):
            yield (("models", i, "name"), f"{m.name!r} ends like a gray release's canary engines "
                                          "(<unit>-canary); pick another name")
    serving = [name for name, g in groups.items() if "serving" in g]
    if models[0].hosts is not None and hosts is not None and set(models[0].hosts) != set(serving):
        yield (("models", 0, "hosts"),
               "the first model is the primary one, which every serving host's health check asks; "
               "remove its hosts so that it runs on all of them")
    for i, m in enumerate(models):
        for j, name in enumerate(m.hosts or []):
            loc: Loc = ("models", i, "hosts", j)
            if provider != "baremetal":
                yield (loc[:3], f"provider {provider} names its hosts itself (Terraform); remove hosts "
                                "so the model runs on every serving host")
                break
            if name in (m.hosts or [])[:j]:
                yield (loc, f"host {name!r} is listed twice; list it once")
            elif hosts is not None and name not in groups:
                yield (loc, f"unknown host {name!r}; use one of {', '.join(groups)}")
            elif hosts is not None and "serving" not in groups[name]:
                yield (loc, f"host {name!r} is not in the serving group, so it runs no engine; "
                            "add serving to its groups or name a serving host")

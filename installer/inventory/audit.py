"""The `audit:` section: the per-request audit trail each gateway host keeps, and what of a
request's text it may retain."""

from typing import Annotated, Any

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from installer.inventory.fields import Strict, matching, unset_dropped
from service import audit_retain


class AuditRedaction(Strict):
    """A redaction (docs/audit.md#keeping-prompts-and-answers): each match of `pattern` becomes
    `[redacted:<name>]` before the record is written. Written as a built-in's name alone, or as
    {name, pattern}: one type, not a union, so a bad pattern is named at its own line."""

    name: Annotated[str, matching(
        audit_retain.NAME[1:-1], "a redaction name: a-z, 0-9 and '_', starting with a letter (e.g. employee_id)"
    )]
    pattern: Annotated[str, Field(min_length=1, max_length=1000)] | None = None  # None: the built-in

    @model_validator(mode="before")
    @classmethod
    def _builtin_by_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("pattern")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        problem = audit_retain.pattern_problem(value) if value is not None else None
        if problem:
            raise ValueError(f"the redaction pattern {problem}")
        return value

    @model_validator(mode="after")
    def _known(self) -> "AuditRedaction":
        if self.pattern is None and self.name not in audit_retain.BUILTIN:
            raise ValueError(
                f"{self.name!r} is no built-in redaction ({', '.join(audit_retain.BUILTIN)}); "
                "give your own as {name: ..., pattern: ...}"
            )
        return self

    def gateway(self) -> str | dict[str, str]:
        """As the gateways' config has it (service/config.py's RetainConfig)."""
        return self.name if self.pattern is None else {"name": self.name, "pattern": self.pattern}


class AuditRetain(Strict):
    """What of a request's text the trail keeps (service/audit_retain.py): off unless said here.
    A list of patterns, not a plugin: the inventory carries no code to run on the hosts."""

    prompts: bool = False
    answers: bool = False
    # Applied in order before anything is written: built-in names and the operator's patterns.
    redact: list[AuditRedaction] = Field(
        default_factory=lambda: [AuditRedaction(name=name) for name in audit_retain.BUILTIN]
    )
    # Characters kept of each of the prompt and the answer (after redaction); the rest is cut.
    max_chars: Annotated[int, Field(ge=1, le=65_536)] = 16_384

    @model_validator(mode="after")
    def _named_once(self) -> "AuditRetain":
        names = [r.name for r in self.redact]
        if len(set(names)) != len(names):
            raise ValueError(f"each redaction name once: {names}")
        return self


class Audit(Strict):
    """The per-request audit trail each gateway host keeps (service/request_audit.py,
    docs/audit.md): one hash-chained record per request, never the prompt or the answer unless
    `retain` says so."""

    requests: bool = True
    # Days of records a host keeps (a day's file is removed once it is older); 0: never removed.
    retention_days: Annotated[int, Field(ge=0, le=36_500)] = 365
    # A host's file a day may grow to this (MiB); then refusals are counted, not recorded one by
    # one (docs/audit.md#size). 0: no cap.
    max_mb_per_day: Annotated[int, Field(ge=0, le=1_048_576)] = 1024
    retain: AuditRetain | None = None  # None: never the prompt or the answer

    @model_validator(mode="after")
    def _retain_needs_the_trail(self) -> "Audit":
        if self.retain is not None and not self.requests:
            raise ValueError(
                "audit.retain keeps texts in the per-request trail: set audit.requests: true, or drop retain"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump_retain_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), ("retain",))

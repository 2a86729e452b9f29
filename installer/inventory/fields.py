"""What every inventory section is made of: the strict base model and the field types that
recur across sections.

`extra="forbid"` everywhere so a typo'd key is an error, not a silent default. `strict=True`
everywhere too: `true` is not the port 1, "8080" is not a number and 8.0 is not a count. Strings
end up in systemd units, ssh and vLLM command lines and host paths, so none may hold a control
character, and the ones that become names or paths have patterns.
"""

import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

Port = Annotated[int, Field(ge=1, le=65535)]
# DNS label rules: these names become host names, systemd unit suffixes and file names.
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
# A file or folder on the control machine: YAML gives a string, so it is converted (not strict).
LocalPath = Annotated[Path, Field(strict=False)]


def matching(pattern: str, what: str) -> AfterValidator:
    """A string that must match `pattern`; the error says what it should be instead."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


# Unicode control (Cc), format (Cf: zero-width, bidi overrides) and line/paragraph separators:
# a newline in a value would start a new line in a systemd unit or an env file.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _refuse_invisible(text: str, what: str) -> None:
    bad = next((c for c in text if unicodedata.category(c) in _INVISIBLE), None)
    if bad is not None:
        raise ValueError(
            f"{what}{text!r} contains the control character U+{ord(bad):04X}; remove it (values end "
            "up in systemd units, command lines and paths, where it would start a line or hide text)"
        )


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        # This field's string, list items or mapping keys; a nested section checks its own values.
        if isinstance(value, str):
            _refuse_invisible(value, "")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str):
                    _refuse_invisible(item, f"item {i}: ")
        elif isinstance(value, dict):
            for key in value:
                if isinstance(key, str):
                    _refuse_invisible(key, "key ")
        return value


def unset_dropped(model: BaseModel, data: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """`data` (the model's dump) without those of `keys` the input left unset: a setting added
    later dumps as before it existed, so the config digest of a revision made then
    (installer/state/revisions.py) stays what it was."""
    for key in set(keys) - model.model_fields_set:
        data.pop(key, None)
    return data

"""The choices of an OpenAI answer or stream event, read the way every reader in the gateway must:
an engine's body is not trusted to be JSON, an object, or to hold a list of objects (a truncated
event, an error body, a deeply nested one), and reading it never raises."""

import json
from typing import Any


def choices(data: bytes) -> list[dict[str, Any]]:
    """The choices of `data` that are objects; none when it is not JSON or has no list of them."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return []
    found = obj.get("choices") if isinstance(obj, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

"""JSON that strict parsers accept: no NaN or Infinity literals, and no number ever a string."""

from __future__ import annotations

import json
import math
from typing import Any


def json_safe(value: Any, _seen: frozenset[int] = frozenset()) -> Any:
    """Non-finite floats become null everywhere in `value`: a field that holds a number holds a
    number or nothing, never a string (reports say in words what a missing size means)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (dict, list, tuple)):
        if id(value) in _seen:
            raise ValueError("circular reference")
        seen = _seen | {id(value)}
        if isinstance(value, dict):
            return {k: json_safe(v, seen) for k, v in value.items()}
        return [json_safe(v, seen) for v in value]
    return value


def dumps(value: Any, indent: int | None = 2) -> str:
    return json.dumps(json_safe(value), indent=indent, allow_nan=False, default=str)

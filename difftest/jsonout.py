"""JSON that strict parsers accept: no NaN or Infinity literals, one spelling for non-finite."""

from __future__ import annotations

import json
import math
from typing import Any


def json_safe(value: Any, _seen: frozenset[int] = frozenset()) -> Any:
    """Non-finite floats become null (nan) or the strings "inf"/"-inf", everywhere in `value`."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
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

"""JSON column values that every reader can serialise (orjson: 64-bit integers, finite floats,
nesting under 255 levels) and every database can store.

    check_storable(value)      # ValueError naming the offending place; call before saving
    readable(value)            # a copy safe to serialise, whatever was stored long ago

Written values are checked so that a bad one is refused with a 4xx instead of being saved and
then failing every read of the row (and of every audit page that shows it). `readable` keeps
rows stored before the check readable: out-of-range integers become strings, non-finite
floats become null, levels past the limit are cut.
"""
from __future__ import annotations

import math
from typing import Any

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 32
MAX_ITEMS = 10_000
MAX_STRING = 100_000


def check_storable(value: Any, where: str = "value") -> Any:
    """Returns `value` unchanged, or raises ValueError saying what cannot be stored."""
    count = _check(value, where, 0)
    if count > MAX_ITEMS:
        raise ValueError(f"{where} holds {count} values; at most {MAX_ITEMS} are stored")
    return value


def _check(value: Any, where: str, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"{where}: integer {_short(value)} is outside the 64-bit range")
        return 1
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a finite number")
        return 1
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise ValueError(f"{where}: a string longer than {MAX_STRING} characters")
        return 1
    if isinstance(value, dict):
        return 1 + sum(_check(k, f"{where} key", depth + 1) + _check(v, f"{where}.{k}", depth + 1)
                       for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 1 + sum(_check(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


def _short(number: int) -> str:
    text = str(number)
    return text if len(text) <= 24 else f"{text[:10]}…({len(text)} digits)"


def readable(value: Any, depth: int = 0) -> Any:
    """A JSON-serialisable copy of a stored value (see the module docstring)."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if INT_MIN <= value <= INT_MAX else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): readable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [readable(v, depth + 1) for v in value]
    return str(value)

"""Row → plain dict (JSON-safe) for API responses and audit before/after images."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import inspect

from registry.json_values import readable

HIDDEN_COLUMNS = {"key_hash"}  # never leaves the database, not even into the audit log


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite drops tzinfo on the way back; every stored time is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    if isinstance(value, (dict, list, int, float)):
        return readable(value)  # a JSON column written before values were checked
    return value


def row_to_dict(row: Any, *, exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    mapper = inspect(row).mapper
    skip = HIDDEN_COLUMNS | set(exclude)
    return {
        attr.key: _json_value(getattr(row, attr.key))
        for attr in mapper.column_attrs
        if attr.key not in skip
    }

"""One metadata row per finished request (no prompt or response bodies), for the console's
request history. The usage sink appends them in its batches and prunes past the retention.
The table is registry.orm.request_log's `RequestLog`.

    append_requests(session, rows)            # list of dicts with RequestLog's columns
    prune_requests(session, older_than=dt)    # returns rows deleted
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from registry.orm.request_log import RequestLog


def append_requests(session: Session, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(RequestLog.__table__), rows)


def prune_requests(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestLog).where(RequestLog.created_at < older_than)).rowcount


__all__ = ["append_requests", "prune_requests"]

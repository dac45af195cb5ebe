"""One metadata row per finished request (no prompt or response bodies), for the console's
request history. The usage sink appends them in its batches and prunes past the retention.
The table is registry.orm.request_log's `RequestLog`.

    append_requests(session, rows)            # list of dicts with RequestLog's columns
    prune_requests(session, older_than=dt)    # returns rows deleted
    logged = logged_requests(session, ["req-1", "req-2"], earliest, latest)
                                              # {(request_id, created_at), ...} already there
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from registry.orm.request_log import RequestLog


def append_requests(session: Session, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(RequestLog.__table__), rows)


def logged_requests(session: Session, request_ids: list[str], earliest: datetime,
                    latest: datetime) -> set[tuple[str, datetime]]:
    """(request_id, created_at) of the rows among `request_ids` created between `earliest`
    and `latest` (inclusive), created_at as naive UTC: PostgreSQL gives it back aware,
    SQLite naive."""
    rows = session.execute(select(RequestLog.request_id, RequestLog.created_at).where(
        RequestLog.request_id.in_(request_ids), RequestLog.created_at >= earliest,
        RequestLog.created_at <= latest))
    return {(rid, naive_utc(at)) for rid, at in rows}


def naive_utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at


def prune_requests(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestLog).where(RequestLog.created_at < older_than)).rowcount


__all__ = ["append_requests", "logged_requests", "naive_utc", "prune_requests"]

"""One metadata row per finished request (no prompt or response bodies), for the console's
request history. The usage sink appends them in its batches and prunes past the retention.
The table is registry.orm.request_log's `RequestLog`.

    append_requests(session, rows)            # tuples in REQUEST_COLUMNS order
    prune_requests(session, older_than=dt)    # returns rows deleted
    logged = logged_requests(session, ["req-1", "req-2"], earliest, latest)
                                              # {(request_id, created_at), ...} already there
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from registry.orm.request_log import RequestLog


# The columns append_requests takes, in the order its row tuples give them.
REQUEST_COLUMNS = ("created_at", "request_id", "trace_id", "key_id", "team", "model",
                   "version", "backend", "status", "http_status", "stream", "prompt_tokens",
                   "completion_tokens", "cost", "latency_ms", "ttft_ms", "cache")
# Rows per INSERT: 17 columns x 1,000 stay under SQLite's 32,766 bound parameters.
ROWS_PER_INSERT = 1000
# How SQLAlchemy's SQLite DATETIME stores a value (registry.orm reads it back through it).
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def append_requests(session: Session, rows: list[tuple[Any, ...]]) -> None:
    """Rows as tuples in REQUEST_COLUMNS order, created_at an aware UTC datetime, written as
    multi-row INSERTs with the driver's own placeholders. One statement per 1,000 rows, not
    one step per row: SQLite's driver lets go of the GIL around every step, and the sink's
    thread then waited for the event loop's thread once per row (most of the sink's CPU at
    1,000 requests a second was those hand-overs)."""
    if not rows:
        return
    conn = session.connection()
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        rows = [(row[0].strftime(_SQLITE_TIME),) + row[1:] for row in rows]
    # psycopg takes %s placeholders whatever SQLAlchemy's paramstyle says
    one = "(" + ", ".join(["?" if sqlite else "%s"] * len(REQUEST_COLUMNS)) + ")"
    head = f"INSERT INTO request_log ({', '.join(REQUEST_COLUMNS)}) VALUES "
    for start in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[start:start + ROWS_PER_INSERT]
        conn.exec_driver_sql(head + ", ".join([one] * len(chunk)),
                             tuple(itertools.chain.from_iterable(chunk)))


def logged_requests(session: Session, request_ids: list[str], earliest: datetime,
                    latest: datetime) -> set[tuple[str, datetime]]:
    """(request_id, created_at) of the rows among `request_ids` created between `earliest`
    and `latest` (inclusive; aware UTC datetimes), created_at as naive UTC: PostgreSQL gives
    it back aware, SQLite naive."""
    rows = session.execute(select(RequestLog.request_id, RequestLog.created_at).where(
        RequestLog.request_id.in_(request_ids), RequestLog.created_at >= earliest,
        RequestLog.created_at <= latest))
    return {(rid, naive_utc(at)) for rid, at in rows}


def naive_utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at


def prune_requests(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestLog).where(RequestLog.created_at < older_than)).rowcount


__all__ = ["REQUEST_COLUMNS", "ROWS_PER_INSERT", "append_requests", "logged_requests", "naive_utc", "prune_requests"]

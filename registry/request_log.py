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
_INSERT_HEAD = f"INSERT INTO request_log ({', '.join(REQUEST_COLUMNS)}) VALUES "


def append_requests(session: Session, rows: list[tuple[Any, ...]]) -> None:
    """Rows as tuples in REQUEST_COLUMNS order, created_at an aware UTC datetime, written as
    multi-row INSERTs with the driver's own placeholders, one per 1,000 rows: SQLAlchemy's
    per-row parameter processing was most of the usage sink's own time (figures in
    docs/bench/README.md, "Where the default's CPU goes")."""
    if not rows:
        return
    conn = session.connection()
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        rows = [(row[0].strftime(_SQLITE_TIME),) + row[1:] for row in rows]
    # psycopg takes %s placeholders whatever SQLAlchemy's paramstyle says
    one = "(" + ", ".join(["?" if sqlite else "%s"] * len(REQUEST_COLUMNS)) + ")"
    for start in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[start:start + ROWS_PER_INSERT]
        conn.exec_driver_sql(_INSERT_HEAD + ", ".join([one] * len(chunk)),
                             tuple(itertools.chain.from_iterable(chunk)))


def logged_requests(session: Session, request_ids: list[str], earliest: datetime,
                    latest: datetime) -> set[tuple[str, datetime]]:
    """(request_id, created_at) of the rows among `request_ids` created between `earliest`
    and `latest` (inclusive), every datetime aware UTC (SQLite gives them back naive)."""
    rows = session.execute(select(RequestLog.request_id, RequestLog.created_at).where(
        RequestLog.request_id.in_(request_ids), RequestLog.created_at >= earliest,
        RequestLog.created_at <= latest))
    return {(rid, at if at.tzinfo else at.replace(tzinfo=timezone.utc)) for rid, at in rows}


def prune_requests(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestLog).where(RequestLog.created_at < older_than)).rowcount


__all__ = ["REQUEST_COLUMNS", "ROWS_PER_INSERT", "append_requests", "logged_requests",
           "prune_requests"]

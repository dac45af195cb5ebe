"""Body-log rows ride the usage sink's batches (no write of their own) and are purged past
their retention with the request log's prune, on SQLite and on PostgreSQL."""
from __future__ import annotations

import time

from sqlalchemy import func, select

from common.usage_record import RequestBodies, UsageRecord
from control_plane.body_log_sink import body_rows
from control_plane.usage_sink import PRUNE_EVERY_S, sql_usage_writer
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.orm.guardrails import RequestBody
from tests.registry.databases import any_url  # noqa: F401

DAY_S = 24 * 3600


def rec(i: int, age_s: float = 0.0, bodies: bool = True, key_id: str | None = None
        ) -> UsageRecord:
    return UsageRecord(
        request_id=f"r{i}", key_id=key_id, team="t", model="m", version=None, backend="b",
        prompt_tokens=3, completion_tokens=2, created_at=time.time() - age_s,
        bodies=RequestBodies(mode="full", policy="p", request_body="[EMAIL] " * 3,
                             response_body="ok", request_chars=24, response_chars=2,
                             request_truncated=True) if bodies else None)


def stored(sessions) -> list[str]:
    with sessions() as s:
        return list(s.scalars(select(RequestBody.request_id).order_by(RequestBody.id)))


def test_rows_written_in_batches_and_purged(any_url):
    upgrade(any_url, progress=None)
    sessions = make_session_factory(any_url)
    now = [1000.0]
    writer = sql_usage_writer(sessions, clock=lambda: now[0], body_retention_s=DAY_S)
    writer.sink([rec(0, age_s=2 * DAY_S), rec(1), rec(2, bodies=False)])
    assert stored(sessions) == ["r1"]                 # the old one purged in the same batch
    with sessions() as s:
        row = s.scalar(select(RequestBody))
        assert (row.mode, row.request_truncated, row.response_body, row.request_chars) == \
            ("full", True, "ok", 24)
    writer.sink([rec(3, age_s=2 * DAY_S)])            # within the minute: not purged yet
    assert stored(sessions) == ["r1", "r3"]
    now[0] += PRUNE_EVERY_S
    writer.sink([rec(4)])
    assert stored(sessions) == ["r1", "r4"]
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(RequestBody)) == 2
    sessions.kw["bind"].dispose()


def test_only_records_with_bodies_make_rows():
    rows = body_rows([rec(0, key_id="7"), rec(1, bodies=False), rec(2, key_id="jwt-sub")])
    assert [(r["request_id"], r["key_id"]) for r in rows] == [("r0", 7), ("r2", None)]
    assert rows[0]["findings"] is None

"""The SQL usage sink: every record reaches the request log and the usage buckets, records
older than the retention are pruned, the prune runs at most once a minute (not per batch), a
dead process's spooled records that it had written already are not written twice, and the
collector of `up --workers N` writes what its workers hand off exactly once."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from datetime import timezone

import pytest
from sqlalchemy import func, select

from common.usage_handoff import SpoolHandoff
from common.usage_record import UsageRecord
from common.usage_spool import UsageSpool
from control_plane.usage_sink import (MAX_BATCH, PRUNE_EVERY_S, sql_usage_collector,
                                      sql_usage_sink, sql_usage_writer)
from registry.request_log import ROWS_PER_INSERT
from registry.migrate import upgrade
from registry.db import make_session_factory
from registry.orm.request_log import RequestLog
from registry.orm.usage import Usage
from tests.common.processes import dead_pid

DAY_S = 24 * 3600


def rec(i: int, age_s: float = 0.0) -> UsageRecord:
    return UsageRecord(request_id=f"r{i}", key_id=None, team="t", model="m", version=None,
                       backend="b", prompt_tokens=3, completion_tokens=2,
                       created_at=time.time() - age_s)


def counts(sessions) -> tuple[int, int]:
    with sessions() as s:
        logged = s.scalar(select(func.count()).select_from(RequestLog))
        requests = s.scalar(select(func.coalesce(func.sum(Usage.requests), 0)))
    return logged, requests


def test_records_are_kept_and_the_old_pruned_once_a_minute(sqlite_url):
    upgrade(sqlite_url, progress=None)
    sessions = make_session_factory(sqlite_url)
    now = [1000.0]
    writer = sql_usage_writer(sessions, request_retention_s=DAY_S, clock=lambda: now[0])
    assert writer.max_batch == MAX_BATCH
    writer.sink([rec(0, age_s=2 * DAY_S), rec(1)])   # the first batch prunes: the old row goes
    assert counts(sessions) == (1, 2)                # usage still counts both
    writer.sink([rec(2, age_s=2 * DAY_S)])           # within the minute: no prune
    assert counts(sessions) == (2, 3)
    now[0] += PRUNE_EVERY_S
    writer.sink([rec(3)])                            # a minute on: pruned again
    assert counts(sessions) == (2, 4)
    sessions.kw["bind"].dispose()


def test_a_dead_process_written_records_are_not_written_again(any_url, tmp_path):
    """A process commits its batch and is killed before it releases the spool segment: the
    process that adopts the segment writes only what is not in the request log yet. A later
    request that reuses a request id (clients choose x-request-id) is still written."""
    upgrade(any_url, progress=None)
    sessions = make_session_factory(any_url)
    written = [rec(i) for i in range(3)]
    reused = dataclasses.replace(written[0], created_at=written[0].created_at + 1.5)
    sql_usage_writer(sessions).sink(written)        # the dead process's committed write
    segment = tmp_path / f"{dead_pid()}-0.jsonl"    # ...and its spool, not yet released
    spool = UsageSpool(tmp_path)
    for record in [*written, rec(3), reused]:
        spool.append(record)
    spool.seal()[0].rename(segment)

    async def adopt() -> None:
        writer = sql_usage_writer(sessions, spool=UsageSpool(tmp_path))
        await writer.start()
        await writer.close()

    asyncio.run(adopt())
    assert counts(sessions) == (5, 5)               # r0 r1 r2 r3 and the reused r0: once each
    with sessions() as s:
        ids = sorted(s.scalars(select(RequestLog.request_id)))
    assert ids == ["r0", "r0", "r1", "r2", "r3"]
    assert list(tmp_path.glob("*.jsonl")) == []
    sessions.kw["bind"].dispose()


def test_a_batch_past_one_insert_keeps_every_row_and_field(any_url):
    upgrade(any_url, progress=None)
    sessions = make_session_factory(any_url)
    n = 2 * ROWS_PER_INSERT + 7
    batch = [dataclasses.replace(rec(i), trace_id=f"{i:032x}", ttft_ms=i / 10, stream=i % 2 == 0,
                                 cache="hit" if i % 3 == 0 else None) for i in range(n)]
    sql_usage_writer(sessions).sink(batch)
    assert counts(sessions) == (n, n)
    with sessions() as s:
        last = s.scalars(select(RequestLog).where(RequestLog.request_id == f"r{n - 1}")).one()
    assert (last.trace_id, last.ttft_ms, last.stream, last.cache, last.prompt_tokens,
            last.completion_tokens, last.backend) == (f"{n - 1:032x}", (n - 1) / 10, True,
                                                      None, 3, 2, "b")
    at = last.created_at if last.created_at.tzinfo else last.created_at.replace(
        tzinfo=timezone.utc)                        # SQLite gives naive UTC back
    assert abs(at.timestamp() - batch[-1].created_at) < 1e-3
    sessions.kw["bind"].dispose()


def test_the_collector_writes_what_workers_hand_off_once_even_after_an_unclear_commit(
        any_url, tmp_path):
    """`up --workers N`: the control plane writes its workers' handed-off segments. A batch
    whose COMMIT went through but whose connection broke before the answer came back is tried
    again as replayed: the request log, the usage buckets and the spend count each request
    once."""
    upgrade(any_url, progress=None)
    sessions = make_session_factory(any_url)
    write = sql_usage_sink(sessions)
    unclear = [1]

    def committed_then_lost(batch, replayed):
        write(batch, replayed)
        if unclear:
            unclear.pop()
            raise ConnectionError("server closed the connection unexpectedly")

    spool_dir = tmp_path / "usage-spool"
    handoff = SpoolHandoff(UsageSpool(spool_dir))
    for i in range(5):
        handoff.record(dataclasses.replace(rec(i), cost_usd=0.25))
    handoff.hand_off()
    ready = next(spool_dir.glob("*.ready.jsonl"))     # as another worker's segment
    ready.rename(spool_dir / f"{os.getppid()}-{ready.name.split('-', 1)[1]}")
    collector = sql_usage_collector(sessions, UsageSpool(spool_dir))
    collector.sink = committed_then_lost

    async def collect_twice() -> list[bool]:
        return [await collector.collect(), await collector.collect()]

    assert asyncio.run(collect_twice()) == [False, True]
    assert counts(sessions) == (5, 5)
    with sessions() as s:
        assert s.scalar(select(func.sum(Usage.cost))) == pytest.approx(1.25)
    assert list(spool_dir.iterdir()) == []
    sessions.kw["bind"].dispose()

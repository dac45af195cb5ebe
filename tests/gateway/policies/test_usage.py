"""Usage batches: size and time triggers, flush on shutdown, sink failures."""
from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass

import pytest

from common.usage_writer import UsageWriter


@dataclass(frozen=True)
class UsageRecord:
    request_id: str
    completion_tokens: int


def rec(i: int) -> UsageRecord:
    return UsageRecord(f"r{i}", completion_tokens=i)


async def test_flush_on_batch_size_and_on_interval():
    batches: list[list[UsageRecord]] = []

    async def sink(records):
        batches.append(records)

    writer = UsageWriter(sink, flush_interval_ms=100, max_batch=5)
    await writer.start()
    for i in range(5):
        writer.record(rec(i))
    await asyncio.sleep(0.02)
    assert [len(b) for b in batches] == [5]          # size trigger, before the interval
    writer.record(rec(5))
    await asyncio.sleep(0.02)
    assert len(batches) == 1
    await asyncio.sleep(0.15)
    assert [len(b) for b in batches] == [5, 1]       # time trigger
    await writer.close()


async def test_shutdown_flushes_into_a_real_sql_sink(tmp_path):
    db = sqlite3.connect(tmp_path / "usage.db", check_same_thread=False)   # sink runs in a thread
    db.execute("create table usage (request_id text, completion_tokens int)")

    def sink(records):
        db.executemany("insert into usage values (?, ?)",
                       [(r.request_id, r.completion_tokens) for r in records])
        db.commit()

    writer = UsageWriter(sink, flush_interval_ms=60_000, max_batch=100)
    await writer.start()
    for i in range(250):
        writer.record(rec(i))
    await writer.close()
    assert db.execute("select count(*), sum(completion_tokens) from usage").fetchone() == (
        250, sum(range(250)))
    writer.record(rec(999))                          # after close: dropped, not lost silently
    assert writer.dropped == 1 and writer.written == 250


async def test_failing_sink_is_retried_then_dropped():
    calls = 0

    def flaky(records):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("db restarting")

    writer = UsageWriter(flaky, max_batch=10, max_attempts=2)
    writer.record(rec(1))
    await writer.flush()
    assert writer.pending == 1 and writer.failed_flushes == 1
    await writer.flush()
    assert writer.pending == 0 and writer.written == 1

    def broken(records):
        raise ConnectionError("gone")

    writer = UsageWriter(broken, max_batch=10, max_attempts=2)
    writer.record(rec(1))
    await writer.close()
    assert writer.dropped == 1 and writer.pending == 0


async def test_a_sink_down_for_many_flushes_loses_nothing():
    """While the gateway runs, a failing batch stays queued however long the outage lasts."""
    down, written = [True], []

    def database(records):
        if down[0]:
            raise ConnectionError("database restarting")
        written.extend(records)

    writer = UsageWriter(database, max_batch=10, max_attempts=2)
    for i in range(25):
        writer.record(rec(i))
    for _ in range(10):
        await writer.flush()
    assert writer.pending == 25 and writer.dropped == 0 and writer.failed_flushes == 10
    down[0] = False
    await writer.flush()
    assert writer.pending == 0 and writer.written == 25 and len(written) == 25


async def test_full_queue_drops():
    writer = UsageWriter(lambda r: None, max_batch=2, max_queue=3)
    for i in range(5):
        writer.record(rec(i))
    assert writer.pending == 3 and writer.dropped == 2
    with pytest.raises(ValueError):
        UsageWriter(lambda r: None, max_batch=0)

"""SnapshotSource: polling picks up changes, Redis notifications, surviving a database outage."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from control_plane.snapshots import SnapshotSource, StaticSnapshotSource
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.snapshot import RoutingSnapshot
from tests.registry.databases import create_pg_database, drop_pg_database

REDIS_URL = "redis://127.0.0.1:6379/0"


def add_model(sessions, name: str) -> None:
    """A change made by someone else (another process): no refresh() call here."""
    with sessions.begin() as s:
        q.create_model(s, name)
        q.bump_snapshot_version(s)


async def wait_for(predicate, timeout_s: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def sessions(sqlite_url):
    upgrade(sqlite_url, progress=None)
    factory = make_session_factory(sqlite_url)
    yield factory
    factory.kw["bind"].dispose()


async def test_poller_picks_up_a_change_within_a_second(sessions):
    source = SnapshotSource(sessions, poll_interval_s=0.25)
    seen: list[int] = []
    source.add_listener(lambda snap: seen.append(snap.version))
    await source.start()
    try:
        await wait_for(lambda: seen, 1.0)
        add_model(sessions, "chat")
        elapsed = await wait_for(lambda: "chat" in source.current.models, 1.0)
        assert elapsed < 1.0 and source.current.version == 1
        builds = len(seen)
        await asyncio.sleep(0.6)  # unchanged version: no rebuilds
        assert len(seen) == builds
    finally:
        await source.stop()


async def test_redis_notification_beats_the_poll_interval(sessions):
    channel = f"inferplane:test:{uuid.uuid4().hex}"
    writer = SnapshotSource(sessions, redis_url=REDIS_URL, channel=channel)
    reader = SnapshotSource(sessions, poll_interval_s=60, redis_url=REDIS_URL, channel=channel)
    await reader.start()
    try:
        await wait_for(lambda: reader.current.version == 0 and reader._loaded, 2.0)
        await asyncio.sleep(0.2)  # let the subscription settle
        add_model(sessions, "chat")
        await asyncio.to_thread(writer.refresh)
        await asyncio.to_thread(writer.publish)
        await wait_for(lambda: "chat" in reader.current.models, 1.0)
    finally:
        await reader.stop()


async def test_keeps_the_last_snapshot_while_the_database_is_gone(caplog):
    name, url = create_pg_database()
    try:
        upgrade(url, progress=None)
        sessions = make_session_factory(url)
        add_model(sessions, "chat")
        source = SnapshotSource(sessions, poll_interval_s=0.1)
        await source.start()
        await wait_for(lambda: "chat" in source.current.models, 2.0)
        last = source.current

        drop_pg_database(name)
        await wait_for(lambda: not source.database_ok, 3.0)
        await asyncio.sleep(0.5)  # several failing polls
        assert source.current is last
        assert source.refresh() is last
        outage_logs = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(outage_logs) == 1  # logged once, not once per poll

        # The database comes back (empty, re-migrated): the source follows it again.
        from tests.registry.databases import pg_admin
        pg_admin(f'CREATE DATABASE "{name}"')
        upgrade(url, progress=None)
        add_model(sessions, "other")
        await wait_for(lambda: source.database_ok and "other" in source.current.models, 5.0)
        assert "chat" not in source.current.models
        await source.stop()
        sessions.kw["bind"].dispose()
    finally:
        drop_pg_database(name)


def test_static_source():
    source = StaticSnapshotSource()
    assert source.current.version == 0
    snap = RoutingSnapshot(version=7, models={}, aliases={}, keys={})
    source.set(snap)
    assert source.current is snap and source.refresh() is snap

"""RedisLease on the real Redis: one holder at a time, fencing tokens that only grow, a
paused leader that finds its lease taken steps down, and a release never frees another's."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from redis.asyncio import Redis

from control_plane.leadership.redis_lease import RedisLease

REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def key():
    name = f"inferplane:test-lease:{uuid.uuid4().hex}"
    yield name
    client = Redis.from_url(REDIS)
    await client.delete(name, f"{name}:fence")
    await client.aclose()


def lease(key: str, lease_ms: int = 1000) -> RedisLease:
    return RedisLease(REDIS, key=key, lease_ms=lease_ms, poll_s=0.05)


async def test_one_holder_at_a_time_and_tokens_grow(key):
    first, second = lease(key), lease(key)
    assert await first.try_acquire()
    assert not await second.try_acquire()
    waiting: list[bool] = []
    standby = asyncio.create_task(second.acquire(on_wait=lambda: waiting.append(True)))
    await asyncio.sleep(0.2)
    assert waiting == [True] and not standby.done()
    await first.release()          # a clean stop frees the lease at once
    await asyncio.wait_for(standby, 2)
    await second.release()


async def test_fencing_token_is_the_next_one(key):
    first, second = lease(key), lease(key)
    assert await first.try_acquire()
    token = first.token
    await first.release()
    assert first.token is None             # released: it holds no token any more
    assert await second.try_acquire()
    assert second.token == token + 1       # the fence counts every holder
    await second.release()


async def test_a_crashed_leaders_lease_runs_out(key):
    crashed, standby = lease(key, lease_ms=1000), lease(key, lease_ms=1000)
    assert await crashed.try_acquire()   # never renewed nor released: as after SIGKILL
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(standby.acquire(), 3)
    assert asyncio.get_running_loop().time() - started >= 0.5   # not before the lease ran out
    assert standby.token == crashed.token + 1
    await standby.release()
    await crashed.redis.aclose()


async def test_a_paused_leader_steps_down_and_cannot_release_the_new_lease(key):
    paused, successor = lease(key, lease_ms=1000), lease(key, lease_ms=1000)
    assert await paused.try_acquire()
    await asyncio.sleep(1.2)                   # paused past its lease: it ran out in Redis
    assert await successor.try_acquire()
    assert not await paused.renew()            # its token is no longer the lease's value
    await asyncio.wait_for(paused.hold(), 2)   # hold() returns: leadership lost
    await paused.release()                     # must not free the successor's lease
    assert await successor.renew()
    await successor.release()


async def test_the_leader_keeps_its_lease_by_renewing(key):
    leader, standby = lease(key, lease_ms=1000), lease(key, lease_ms=1000)
    assert await leader.try_acquire()
    holding = asyncio.create_task(leader.hold())
    await asyncio.sleep(2.0)                   # twice the lease: renewals kept it
    assert not holding.done()
    assert not await standby.try_acquire()
    holding.cancel()
    await leader.release()
    assert await standby.try_acquire()
    await standby.release()


async def test_an_unreachable_redis_makes_the_leader_step_down(key):
    leader = lease(key, lease_ms=1000)
    assert await leader.try_acquire()
    unreachable = RedisLease("redis://127.0.0.1:1/0", key=key, lease_ms=1000)
    unreachable.token = leader.token           # a holder whose Redis went away
    await asyncio.wait_for(unreachable.hold(), 3)
    await unreachable.redis.aclose()
    await leader.release()


async def test_a_leader_keeps_its_lease_through_a_migration_longer_than_it(key, tmp_path,
                                                                          monkeypatch):
    """The control plane starts under the lease it just took: migrations slower than the
    lease must not stop its renewals (they run off the event loop), or it would lapse, a
    standby lead, and this one step down mid-start."""
    from control_plane import apps
    from control_plane.settings import load_settings
    from engine_adapter import engine_keys

    # the app configures this process's engine-key secret: the tests after this one keep theirs
    monkeypatch.setattr(engine_keys, "_secret", engine_keys._secret)
    migrate = apps.prepare_database

    def slow_migration(settings):
        time.sleep(2.5)   # 2.5 leases
        return migrate(settings)

    monkeypatch.setattr(apps, "prepare_database", slow_migration)
    config = tmp_path / "cp.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'ip.db'}\n"
                      f"data_dir: {tmp_path / 'data'}\nmodels: []\n")
    leader = lease(key)
    assert await leader.try_acquire()
    holding = asyncio.create_task(leader.hold())
    try:
        async with apps.control_plane_app(load_settings(config), []):
            await asyncio.sleep(0.5)   # a renewal's time: one finding the lease gone returns
            assert not holding.done(), "the lease was lost while the control plane started"
    finally:
        holding.cancel()
        await leader.release()

"""Which control plane leads: it supervises engines and runs the controllers; others stand by.

    leader = leader_for(settings)     # AdvisoryLock (leader.lock: database) or RedisLease
    await leader.acquire(on_wait=...)
    await leader.hold()               # returns when leadership is lost: the process stops
    await leader.release()
"""
from __future__ import annotations

from typing import Callable, Protocol

from control_plane.leadership.advisory_lock import AdvisoryLock
from control_plane.leadership.redis_lease import RedisLease


class Leader(Protocol):
    async def acquire(self, on_wait: Callable[[], None] | None = None) -> None: ...
    async def hold(self) -> None: ...
    async def release(self) -> None: ...


def leader_for(settings) -> Leader:
    """The election the settings name (`leader.lock`): the registry database's advisory lock
    (on SQLite there is one control plane: it always leads), or a Redis lease."""
    if settings.leader.lock == "redis":
        return RedisLease(settings.redis_url, key=settings.leader.key,
                          lease_ms=settings.leader.lease_ms)
    return AdvisoryLock(settings.resolved_database_url())

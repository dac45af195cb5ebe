"""Leader election through a Redis lease (`leader.lock: redis`): for registries without
PostgreSQL's advisory locks, or where the database is shared with other tenants.

    lease = RedisLease("redis://127.0.0.1:6379/0", key="inferplane:leader", lease_ms=10_000)
    await lease.acquire(on_wait=lambda: print("standby"))   # returns once this process leads
    lease.token                                             # fencing token: grows per leader
    await lease.hold()                                      # returns when leadership is lost
    await lease.release()

The lease is one key, set only where it is absent and with an expiry (SET NX PX, done in one
Lua script with the INCR of `<key>:fence`): whoever sets it leads and takes the next fencing
token, which is also the key's value, so a renewal (PEXPIRE) or a
release (DEL) only ever touches this holder's own lease. A leader renews every third of the
lease. It steps down when a renewal finds the lease gone or someone else's (it was paused past
its lease), and also when it could not renew for two thirds of the lease (Redis unreachable):
by then it can no longer be sure it leads, while a standby takes over only once the full lease
has run out in Redis. A crashed leader's lease expires on its own, so a standby leads within
one lease plus one poll.
"""
from __future__ import annotations

import asyncio
import logging
import time

from redis.asyncio import Redis

from control_plane.leadership.standby import stand_by

log = logging.getLogger("inferplane.leader")

# KEYS[1] lease, KEYS[2] fence; ARGV[1] lease ms. Returns the new token, or nil when held.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return nil end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
return token
"""
# KEYS[1] lease; ARGV[1] our token, ARGV[2] lease ms. 1 renewed, 0 not ours any more.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    def __init__(self, redis_url: str, key: str = "inferplane:leader", lease_ms: int = 10_000,
                 poll_s: float = 1.0):
        self.redis = Redis.from_url(redis_url, socket_timeout=lease_ms / 3000,
                                    socket_connect_timeout=lease_ms / 3000)
        self.key, self.fence = key, f"{key}:fence"
        self.lease_ms, self.poll_s = lease_ms, poll_s
        self.token: int | None = None
        self._acquire = self.redis.register_script(_ACQUIRE)
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    async def try_acquire(self) -> bool:
        token = await self._acquire(keys=[self.key, self.fence], args=[self.lease_ms])
        if token is None:
            return False
        self.token = int(token)
        return True

    async def acquire(self, on_wait=None) -> None:
        """Return once this process holds the lease."""
        await stand_by(self.try_acquire, self.poll_s, on_wait)
        log.info("leading this control plane (Redis lease, fencing token %d)", self.token)

    async def renew(self) -> bool:
        """True while the lease is still this holder's (and is extended by a full lease)."""
        return bool(await self._renew(keys=[self.key], args=[self.token, self.lease_ms]))

    async def hold(self) -> None:
        """Renew every third of the lease; return when leadership is lost."""
        every = self.lease_ms / 3000
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(every)
            try:
                if not await self.renew():
                    log.error("the leader lease (token %s) is no longer ours", self.token)
                    return
                renewed = time.monotonic()
            except Exception as exc:
                if time.monotonic() - renewed >= 2 * every:
                    log.error("could not renew the leader lease for %.1fs: %s",
                              time.monotonic() - renewed, exc)
                    return
                log.warning("leader lease renewal failed (will retry): %s", exc)

    async def release(self) -> None:
        try:
            if self.token is not None:
                await self._release(keys=[self.key], args=[self.token])
        finally:
            self.token = None
            await self.redis.aclose()

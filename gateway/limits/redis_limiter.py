"""Rate limiter shared by all gateway replicas through Redis (Lua scripts, one round trip)."""
from __future__ import annotations

from typing import Callable

import redis.asyncio as aioredis

from gateway.limits.base import RateLimiter
from gateway.limits.outage import STORE_ERRORS, FailMode, OutageLog, check_fail_mode, make_client
from gateway.limits.redis_lua import ACQUIRE, ADJUST
from gateway.limits.types import BUCKET_S, WINDOW_S, Counter, Decision
from gateway.limits.window import RawResult


class RedisRateLimiter(RateLimiter):
    """Atomic across replicas: each acquire/reconcile is one EVALSHA.

    `prefix` namespaces every key; on Redis Cluster keep a hash tag in it (the default has one) so all
    counters of one call live in one slot. When Redis is unreachable, `fail_mode` decides:
    "fail_open" admits (no accounting), "fail_closed" rejects with reason "unavailable". Either
    way nothing is raised to the caller, and the outage is logged once.
    """

    def __init__(self, client: aioredis.Redis | str, prefix: str = "inferplane:{rl}:",
                 fail_mode: FailMode = "fail_open", window_s: float = WINDOW_S,
                 bucket_s: float = BUCKET_S, clock: Callable[[], float] | None = None,
                 unavailable_retry_after_s: float = 1.0) -> None:
        super().__init__(window_s, bucket_s, clock)
        self.fail_mode = check_fail_mode(fail_mode)
        self._owns_client = isinstance(client, str)
        self.redis = make_client(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.unavailable_retry_after_s = unavailable_retry_after_s
        self.outage = OutageLog("rate limiter", self.fail_mode)
        # Registered once; redis-py sends EVALSHA and reloads the script on NOSCRIPT.
        self._acquire_script = self.redis.register_script(ACQUIRE)
        self._adjust_script = self.redis.register_script(ADJUST)

    def _args(self) -> list:
        now = self._now_ms()
        return ["" if now is None else now, self.window_ms, self.bucket_ms]

    async def _acquire(self, counters: list[Counter], costs: list[int]) -> RawResult | None:
        keys = [self.prefix + c.storage_key for c in counters]
        args = self._args()
        for counter, cost in zip(counters, costs):
            args += [counter.limit, cost]
        try:
            reply = await self._acquire_script(keys=keys, args=args)
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        n = len(counters)
        values = [int(v) for v in reply]
        return RawResult(values[0], values[1], values[2], values[3], values[4:4 + n],
                         values[4 + n:4 + 2 * n])

    async def _adjust(self, token_keys: list[str], bucket_ms: int, delta: int) -> None:
        keys = [self.prefix + k for k in token_keys]
        try:
            await self._adjust_script(keys=keys, args=self._args() + [bucket_ms, delta])
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()

    def _store_down_decision(self) -> Decision:
        if self.fail_mode == "fail_open":
            return Decision(allowed=True)
        return Decision(allowed=False, reason="unavailable", tripped="store",
                        retry_after=self.unavailable_retry_after_s)

    async def close(self) -> None:
        if self._owns_client:
            await self.redis.aclose()

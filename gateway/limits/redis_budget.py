"""Budget counters in Redis, shared by every gateway replica; reserve is one Lua script."""
from __future__ import annotations

import redis.asyncio as aioredis

from gateway.limits.budget import Counter, SpendTracker
from gateway.limits.outage import STORE_ERRORS, FailMode, OutageLog, check_fail_mode, make_client
from gateway.limits.types import Decision

# KEYS: spend counters. ARGV[1]: the estimate; then per key: max ('' = none), floor, ttl_s.
# Returns {-1, '0'} after adding the estimate to every counter, else {index, spent} of the
# first counter the estimate does not fit in (nothing changed). Numbers go back as strings:
# Redis truncates Lua numbers to integers.
RESERVE = """
local est = tonumber(ARGV[1])
local spent = {}
for i = 1, #KEYS do
  local base = 2 + 3 * (i - 1)
  local value = tonumber(redis.call('GET', KEYS[i]) or '0')
  local floor = tonumber(ARGV[base + 1])
  if value < floor then value = floor end
  spent[i] = value
  local limit = tonumber(ARGV[base])
  if limit and (value >= limit or value + est > limit) then
    return {i - 1, string.format('%.17g', value)}
  end
end
for i = 1, #KEYS do
  local ttl = tonumber(ARGV[2 + 3 * (i - 1) + 2])
  redis.call('SET', KEYS[i], string.format('%.17g', spent[i] + est))
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return {-1, '0'}
"""

# Adds ARGV[1] to each counter that still exists (an expired period's counter stays gone).
ADD = """
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBYFLOAT', KEYS[i], ARGV[1]) end
end
return 0
"""


class RedisSpendTracker(SpendTracker):
    """Redis down: fail_open lets requests through unbudgeted, fail_closed refuses them with
    reason "unavailable"; spend settled during the outage is lost."""

    def __init__(self, client: aioredis.Redis | str, prefix: str = "inferplane:{rl}:",
                 fail_mode: FailMode = "fail_open") -> None:
        self.fail_mode = check_fail_mode(fail_mode)
        self._owns_client = isinstance(client, str)
        self.redis = make_client(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.outage = OutageLog("budget tracker", self.fail_mode)
        self._reserve_script = self.redis.register_script(RESERVE)
        self._add_script = self.redis.register_script(ADD)

    async def _reserve(self, counters: list[Counter],
                       estimate: float) -> tuple[int, float] | None:
        args: list = [repr(estimate)]
        for c in counters:
            limit = c.budget.max_usd
            args += ["" if limit is None else repr(float(limit)), repr(c.floor), c.ttl_s]
        try:
            index, spent = await self._reserve_script(
                keys=[self.prefix + c.key for c in counters], args=args)
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        return int(index), float(spent)

    async def _add(self, keys: list[str], usd: float) -> None:
        try:
            await self._add_script(keys=[self.prefix + k for k in keys], args=[repr(usd)])
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()

    async def _get(self, key: str) -> float | None:
        try:
            value = await self.redis.get(self.prefix + key)
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        return None if value is None else float(value)

    def _store_down_decision(self) -> Decision | None:
        if self.fail_mode == "fail_open":
            return None
        return Decision(allowed=False, reason="unavailable", tripped="store", retry_after=1.0)

    async def close(self) -> None:
        if self._owns_client:
            await self.redis.aclose()

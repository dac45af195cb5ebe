"""Budget counters in Redis, shared by every gateway replica; reserve is one Lua script."""
from __future__ import annotations

import time

import redis.asyncio as aioredis

from gateway.limits.budget import DEFAULT_HOLD_TTL_S, BudgetHold, Counter, SpendTracker
from gateway.limits.outage import STORE_ERRORS, FailMode, OutageLog, check_fail_mode, make_client
from gateway.limits.types import Decision

# Per counter three keys: its settled spend, a sorted set of hold ids by expiry (unix s) and
# a hash of hold id -> USD. KEYS: those triples. ARGV[1]: the estimate, ARGV[2]: now,
# ARGV[3]: the hold id, ARGV[4]: when it expires; then per counter: max ('' = none), floor,
# ttl_s. Expired holds are dropped first. Returns {-1, '0'} after holding the estimate on
# every counter, else {index, settled + held} of the first counter it does not fit in
# (nothing changed). Numbers go back as strings: Redis truncates Lua numbers to integers.
RESERVE = """
local est, now, id, expires = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local n = #KEYS / 3
local spent = {}
for i = 1, n do
  local k, z, h = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
    redis.call('HDEL', h, unpack(expired))
  end
  local held = 0
  for _, v in ipairs(redis.call('HVALS', h)) do held = held + tonumber(v) end
  local base = 5 + 3 * (i - 1)
  local value = tonumber(redis.call('GET', k) or '0')
  local floor = tonumber(ARGV[base + 1])
  if value < floor then value = floor end
  spent[i] = value
  local limit = tonumber(ARGV[base])
  if limit and (value + held >= limit or value + held + est > limit) then
    return {i - 1, string.format('%.17g', value + held)}
  end
end
local hold_ttl = math.ceil(expires - now) + 60
for i = 1, n do
  local k, z, h = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local ttl = tonumber(ARGV[5 + 3 * (i - 1) + 2])
  redis.call('SET', k, string.format('%.17g', spent[i]))   -- materialises the floor
  if ttl > 0 then redis.call('EXPIRE', k, ttl) end
  redis.call('ZADD', z, expires, id)
  redis.call('HSET', h, id, string.format('%.17g', est))
  redis.call('EXPIRE', z, hold_ttl)
  redis.call('EXPIRE', h, hold_ttl)
end
return {-1, '0'}
"""

# Releases hold ARGV[2] and adds ARGV[1] to each counter that still exists (an expired
# period's counter stays gone).
SETTLE = """
for i = 1, #KEYS / 3 do
  local k, z, h = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  redis.call('ZREM', z, ARGV[2])
  redis.call('HDEL', h, ARGV[2])
  if redis.call('EXISTS', k) == 1 then redis.call('INCRBYFLOAT', k, ARGV[1]) end
end
return 0
"""

# {settled, live holds} of one counter (nil when it does not exist); KEYS as above, ARGV: now.
SPENT = """
local value = redis.call('GET', KEYS[1])
if not value then return nil end
local held = 0
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf')
if #live > 0 then
  for _, v in ipairs(redis.call('HMGET', KEYS[3], unpack(live))) do
    held = held + (tonumber(v) or 0)
  end
end
return {value, string.format('%.17g', held)}
"""


class RedisSpendTracker(SpendTracker):
    """Redis down: fail_open lets requests through unbudgeted, fail_closed refuses them with
    reason "unavailable"; spend settled during the outage is lost (SQL still records it, and
    a lifetime budget's counter starts again from SQL once Redis has lost it)."""

    def __init__(self, client: aioredis.Redis | str, prefix: str = "inferplane:{rl}:",
                 fail_mode: FailMode = "fail_open", hold_ttl_s: float = DEFAULT_HOLD_TTL_S,
                 clock=time.time) -> None:
        self.fail_mode = check_fail_mode(fail_mode)
        self.hold_ttl_s, self.clock = hold_ttl_s, clock
        self._owns_client = isinstance(client, str)
        self.redis = make_client(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.outage = OutageLog("budget tracker", self.fail_mode)
        self._reserve_script = self.redis.register_script(RESERVE)
        self._settle_script = self.redis.register_script(SETTLE)
        self._spent_script = self.redis.register_script(SPENT)

    def _keys(self, counter_keys) -> list[str]:
        return [self.prefix + k + suffix for k in counter_keys for suffix in ("", ":holds", ":held")]

    async def _reserve(self, counters: list[Counter], hold: BudgetHold,
                       expires_at: float) -> tuple[int, float] | None:
        args: list = [repr(hold.estimate_usd), repr(self.clock()), hold.hold_id,
                      repr(expires_at)]
        for c in counters:
            limit = c.budget.max_usd
            args += ["" if limit is None else repr(float(limit)), repr(c.floor), c.ttl_s]
        try:
            index, spent = await self._reserve_script(
                keys=self._keys(c.key for c in counters), args=args)
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        return int(index), float(spent)

    async def _settle(self, hold: BudgetHold, usd: float) -> None:
        try:
            await self._settle_script(keys=self._keys(hold.keys), args=[repr(usd), hold.hold_id])
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()

    async def _get(self, key: str) -> tuple[float, float] | None:
        try:
            value = await self._spent_script(keys=self._keys([key]), args=[repr(self.clock())])
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        return None if value is None else (float(value[0]), float(value[1]))

    def _store_down_decision(self) -> Decision | None:
        if self.fail_mode == "fail_open":
            return None
        return Decision(allowed=False, reason="unavailable", tripped="store", retry_after=1.0)

    async def close(self) -> None:
        if self._owns_client:
            await self.redis.aclose()

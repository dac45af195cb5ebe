"""Sliding-window counters: the reference semantics of every rate limiter.

Each counter is a set of 1-second buckets {bucket_start_ms: amount}. Usage recorded in bucket b
counts until b + bucket + window, so any 60-second interval holds at most `limit` — the window is
strict, never a burst of two limits across a minute boundary (what a fixed window or a token
bucket would allow). An admission checks every counter and charges all of them or none.

`redis_lua.py` implements exactly these steps in Lua; keep the two in step.
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.limits.types import Counter

OK, RATE_LIMITED, TOO_LARGE = 0, 1, 2


@dataclass
class RawResult:
    status: int
    tripped_index: int          # -1 when allowed
    retry_ms: int               # when the tripped counter could take this request
    bucket_ms: int              # bucket the admission was charged to
    used: list[int]             # per counter, after the admission when allowed
    reset_ms: list[int]         # per counter, until its oldest usage expires


def bucket_of(now_ms: int, bucket_ms: int) -> int:
    return now_ms - now_ms % bucket_ms


def expiry_ms(bucket: int, window_ms: int, bucket_ms: int) -> int:
    return bucket + bucket_ms + window_ms


class WindowStore:
    """In-process counters. Synchronous on purpose: with no await inside, each call is atomic
    with respect to every other coroutine on the event loop."""

    def __init__(self, window_ms: int, bucket_ms: int) -> None:
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        self._counters: dict[str, dict[int, int]] = {}
        self._calls = 0

    def _live(self, key: str, now_ms: int) -> dict[int, int]:
        buckets = self._counters.get(key)
        if buckets is None:
            return {}
        for b in [b for b in buckets if expiry_ms(b, self.window_ms, self.bucket_ms) <= now_ms]:
            del buckets[b]
        return buckets

    def acquire(self, counters: list[Counter], costs: list[int], now_ms: int) -> RawResult:
        self._maybe_sweep(now_ms)
        live = [self._live(c.storage_key, now_ms) for c in counters]
        used = [sum(b.values()) for b in live]
        reset = [self._reset_ms(b, now_ms) for b in live]
        bucket = bucket_of(now_ms, self.bucket_ms)
        for i, (counter, cost) in enumerate(zip(counters, costs)):
            if cost > counter.limit:
                return RawResult(TOO_LARGE, i, self.window_ms, bucket, used, reset)
        worst, worst_retry = -1, -1
        for i, (counter, cost) in enumerate(zip(counters, costs)):
            if used[i] + cost > counter.limit:
                retry = self._retry_ms(live[i], used[i] + cost - counter.limit, now_ms)
                if retry > worst_retry:
                    worst, worst_retry = i, retry
        if worst >= 0:
            return RawResult(RATE_LIMITED, worst, worst_retry, bucket, used, reset)
        for i, (counter, cost) in enumerate(zip(counters, costs)):
            buckets = self._counters.setdefault(counter.storage_key, {})
            buckets[bucket] = buckets.get(bucket, 0) + cost
            used[i] += cost
            reset[i] = self._reset_ms(buckets, now_ms)
        return RawResult(OK, -1, 0, bucket, used, reset)

    def adjust(self, keys: list[str], bucket: int, delta: int, now_ms: int) -> None:
        """Refund (delta < 0) out of the reservation's bucket, or charge (delta > 0) into the
        current bucket, because extra tokens were produced now."""
        for key in keys:
            buckets = self._live(key, now_ms)
            if delta < 0:
                if bucket in buckets:
                    left = buckets[bucket] + delta
                    if left > 0:
                        buckets[bucket] = left
                    else:
                        del buckets[bucket]
            elif delta > 0:
                current = bucket_of(now_ms, self.bucket_ms)
                stored = self._counters.setdefault(key, {})
                stored[current] = stored.get(current, 0) + delta

    def _reset_ms(self, buckets: dict[int, int], now_ms: int) -> int:
        if not buckets:
            return 0
        return expiry_ms(min(buckets), self.window_ms, self.bucket_ms) - now_ms

    def _retry_ms(self, buckets: dict[int, int], need: int, now_ms: int) -> int:
        freed = 0
        for b in sorted(buckets):
            freed += buckets[b]
            if freed >= need:
                return expiry_ms(b, self.window_ms, self.bucket_ms) - now_ms
        return self.window_ms

    def _maybe_sweep(self, now_ms: int) -> None:
        # Idle subjects would otherwise keep an empty dict forever.
        self._calls += 1
        if self._calls % 4096:
            return
        for key in list(self._counters):
            if not self._live(key, now_ms):
                del self._counters[key]

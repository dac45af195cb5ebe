"""In-process rate limiter for a single gateway process (the embedded default)."""
from __future__ import annotations

from typing import Callable

from gateway.limits.base import RateLimiter, now_ms_from
from gateway.limits.types import BUCKET_S, WINDOW_S, Counter
from gateway.limits.window import RawResult, WindowStore


class InMemoryRateLimiter(RateLimiter):
    """Same semantics as RedisRateLimiter; state lives in this process only."""

    def __init__(self, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(window_s, bucket_s, clock)
        self._store = WindowStore(self.window_ms, self.bucket_ms)

    async def _acquire(self, counters: list[Counter], costs: list[int]) -> RawResult:
        return self._store.acquire(counters, costs, now_ms_from(self.clock))

    async def _adjust(self, token_keys: list[str], bucket_ms: int, delta: int) -> None:
        self._store.adjust(token_keys, bucket_ms, delta, now_ms_from(self.clock))

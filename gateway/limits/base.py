"""The RateLimiter interface and the parts every implementation shares.

Call pattern on the request path::

    decision = await limiter.acquire(limits, tokens=prompt_tokens + max_tokens)
    if not decision.allowed:
        # 429 (503 when decision.reason == "unavailable") with decision.headers()
        ...
    try:
        ...                                  # serve the request
    finally:
        await limiter.reconcile(decision.reservation, actual_tokens)   # prompt + completion

`acquire` checks RPM and TPM of every Limit given (key, team, model, global) in one atomic step:
all counters are charged or none. `reconcile` never raises and is idempotent, so calling it from
a `finally` (client disconnects, backend errors) keeps TPM accounting exact.
"""
from __future__ import annotations

import abc
import time
from typing import Callable, Sequence

from gateway.limits.types import (
    BUCKET_S, WINDOW_S, Counter, CounterState, Decision, Limit, Reservation, counters_for,
)
from gateway.limits.window import OK, TOO_LARGE, RawResult


class RateLimiter(abc.ABC):
    def __init__(self, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S,
                 clock: Callable[[], float] | None = None) -> None:
        if window_s <= 0 or bucket_s <= 0 or bucket_s > window_s:
            raise ValueError("need 0 < bucket_s <= window_s")
        self.window_ms = int(window_s * 1000)
        self.bucket_ms = int(bucket_s * 1000)
        self.clock = clock

    async def acquire(self, limits: Sequence[Limit], tokens: int) -> Decision:
        """Admit one request that may use up to `tokens` tokens (prompt + max_tokens)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        counters = counters_for(tuple(limits))
        if not counters:
            return Decision(allowed=True, reservation=None)
        costs = [1 if c.kind == "requests" else tokens for c in counters]
        raw = await self._acquire(counters, costs)
        if raw is None:
            return self._store_down_decision()
        return self._decision(counters, raw, tokens)

    async def reconcile(self, reservation: Reservation | None, actual_tokens: int) -> None:
        """Settle a reservation with the tokens really used: refunds the unused part, charges
        any excess. Safe to call more than once and with None (nothing was reserved)."""
        if reservation is None or reservation.settled:
            return
        reservation.settled = True
        delta = max(0, int(actual_tokens)) - reservation.tokens
        if delta and reservation.token_keys:
            await self._adjust(list(reservation.token_keys), reservation.bucket_ms, delta)

    async def close(self) -> None:
        """Release connections; the limiter must not be used afterwards."""

    def _now_ms(self) -> int | None:
        return None if self.clock is None else int(self.clock() * 1000)

    @abc.abstractmethod
    async def _acquire(self, counters: list[Counter], costs: list[int]) -> RawResult | None:
        """None means the store is unreachable."""

    @abc.abstractmethod
    async def _adjust(self, token_keys: list[str], bucket_ms: int, delta: int) -> None: ...

    def _store_down_decision(self) -> Decision:
        return Decision(allowed=True)

    def _decision(self, counters: list[Counter], raw: RawResult, tokens: int) -> Decision:
        states = [CounterState(c.name, c.kind, c.limit, raw.used[i], raw.reset_ms[i] / 1000)
                  for i, c in enumerate(counters)]
        if raw.status == OK:
            token_keys = tuple(c.storage_key for c in counters if c.kind == "tokens")
            reservation = Reservation(tokens, raw.bucket_ms, token_keys)
            return Decision(allowed=True, reservation=reservation, counters=states)
        tripped = counters[raw.tripped_index]
        # A zero limit is a block, not an oversized request.
        too_large = raw.status == TOO_LARGE and tripped.limit > 0
        return Decision(allowed=False, reason="too_large" if too_large else "rate_limit",
                        tripped=tripped.name, retry_after=raw.retry_ms / 1000, counters=states)


def now_ms_from(clock: Callable[[], float] | None) -> int:
    return int((clock or time.time)() * 1000)

"""Circuit breakers, one per backend: closed -> open -> half-open -> closed.

Opens when, within the rolling window, at least `min_requests` calls were seen and the failure
rate reaches `failure_rate_threshold`, or after `consecutive_failures` failures in a row. Stays
open for `open_duration_s`, then lets up to `half_open_max_probes` requests through; the first
`half_open_successes` successes close it, any probe failure opens it again.

Call pattern::

    breakers = BreakerRegistry(BreakerConfig(), on_state_change=metrics.breaker_state)
    candidates = [b for b in backends if breakers.get(b.id).is_available()]   # routing filter
    permit = breakers.get(backend.id).try_acquire()
    if permit is None:                      # lost the race for a half-open probe: pick another
        ...
    with permit:                            # exceptions count as failures, cancellation doesn't
        response = await send(...)
        if response.status_code >= 500: permit.failure() else: permit.success()

A permit that ends without an outcome (cancelled) only frees its half-open probe slot. Results
of permits issued before the last state change are ignored: they describe the old state.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from common.vocabulary import BreakerState  # states and their gauge codes, defined once

CLOSED, HALF_OPEN, OPEN = BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN
STATE_CODES = {state: state.code for state in BreakerState}    # gauge values for metrics


@dataclass(frozen=True)
class BreakerConfig:
    window_s: float = 30.0
    min_requests: int = 10
    failure_rate_threshold: float = 0.5
    consecutive_failures: int = 5
    open_duration_s: float = 15.0
    half_open_max_probes: int = 2
    half_open_successes: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.failure_rate_threshold <= 1:
            raise ValueError("failure_rate_threshold must be in (0, 1]")
        if min(self.min_requests, self.consecutive_failures, self.half_open_max_probes,
               self.half_open_successes) < 1 or self.window_s <= 0 or self.open_duration_s < 0:
            raise ValueError("breaker counts must be >= 1 and durations positive")


class Permit:
    """Permission to send one request; report its outcome before leaving the `with`."""

    def __init__(self, breaker: "CircuitBreaker", generation: int, is_probe: bool) -> None:
        self.breaker = breaker
        self.generation = generation
        self.is_probe = is_probe
        self.outcome: bool | None = None
        self._done = False

    def success(self) -> None:
        self.outcome = True

    def failure(self) -> None:
        self.outcome = False

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not issubclass(exc_type, asyncio.CancelledError):
            self.outcome = False
        self.close()

    def close(self) -> None:
        """Report the outcome (idempotent); `with` does this on exit."""
        if not self._done:
            self._done = True
            self.breaker._finish(self)


class CircuitBreaker:
    def __init__(self, backend_id: str, config: BreakerConfig = BreakerConfig(),
                 on_state_change: Callable[[str, str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend_id = backend_id
        self.config = config
        self.on_state_change = on_state_change
        self.clock = clock
        self._state = CLOSED
        self._opened_at = 0.0
        self._outcomes: deque[tuple[float, bool]] = deque()
        self._consecutive_failures = 0
        self._probes_in_flight = 0
        self._probe_successes = 0
        self._generation = 0

    @property
    def state(self) -> str:
        if self._state == OPEN and self.clock() - self._opened_at >= self.config.open_duration_s:
            self._transition(HALF_OPEN)
        return self._state

    def is_available(self) -> bool:
        """Routing filter, no side effects: could a request be sent now?"""
        state = self.state
        if state == HALF_OPEN:
            return self._probes_in_flight < self.config.half_open_max_probes
        return state == CLOSED

    def try_acquire(self) -> Permit | None:
        """Claim permission to send one request (a probe slot when half-open); None = refused."""
        state = self.state
        if state == CLOSED:
            return Permit(self, self._generation, is_probe=False)
        if state == HALF_OPEN and self._probes_in_flight < self.config.half_open_max_probes:
            self._probes_in_flight += 1
            return Permit(self, self._generation, is_probe=True)
        return None

    def record(self, ok: bool) -> None:
        """Report an outcome without a permit. Half-open probe slots are then not enforced:
        prefer try_acquire() + permit where the call site allows it."""
        permit = Permit(self, self._generation, is_probe=False)
        permit.outcome = ok
        permit.close()

    def failure_rate(self) -> float:
        self._trim()
        if not self._outcomes:
            return 0.0
        return sum(1 for _, ok in self._outcomes if not ok) / len(self._outcomes)

    def _finish(self, permit: Permit) -> None:
        if permit.generation != self._generation:
            return    # issued before the last state change: says nothing about this state
        if permit.is_probe:
            self._probes_in_flight -= 1
        if permit.outcome is None:
            return
        if self._state == HALF_OPEN:
            self._probe_result(permit.outcome)
            return
        self._outcomes.append((self.clock(), permit.outcome))
        self._consecutive_failures = 0 if permit.outcome else self._consecutive_failures + 1
        if not permit.outcome and self._should_open():
            self._transition(OPEN)

    def _probe_result(self, ok: bool) -> None:
        if not ok:
            self._transition(OPEN)
            return
        self._probe_successes += 1
        if self._probe_successes >= self.config.half_open_successes:
            self._transition(CLOSED)

    def _should_open(self) -> bool:
        if self._consecutive_failures >= self.config.consecutive_failures:
            return True
        self._trim()
        return (len(self._outcomes) >= self.config.min_requests
                and self.failure_rate() >= self.config.failure_rate_threshold)

    def _trim(self) -> None:
        horizon = self.clock() - self.config.window_s
        while self._outcomes and self._outcomes[0][0] < horizon:
            self._outcomes.popleft()

    def _transition(self, new: BreakerState) -> None:
        old, self._state = self._state, new
        self._generation += 1
        if new == OPEN:
            self._opened_at = self.clock()
        self._outcomes.clear()
        self._consecutive_failures = 0
        self._probes_in_flight = 0
        self._probe_successes = 0
        if self.on_state_change and old != new:
            self.on_state_change(self.backend_id, old, new)


class BreakerRegistry:
    """Breakers by backend id, created on first use; `states()` feeds metrics."""

    def __init__(self, config: BreakerConfig = BreakerConfig(),
                 on_state_change: Callable[[str, str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.on_state_change = on_state_change
        self.clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, backend_id: str) -> CircuitBreaker:
        if backend_id not in self._breakers:
            self._breakers[backend_id] = CircuitBreaker(backend_id, self.config,
                                                        self.on_state_change, self.clock)
        return self._breakers[backend_id]

    # Per-backend shorthands for callers that hold a backend id rather than a breaker.
    def allow(self, backend_id: str) -> bool:
        """Routing filter (no side effects)."""
        return self.get(backend_id).is_available()

    def try_acquire(self, backend_id: str) -> Permit | None:
        return self.get(backend_id).try_acquire()

    def record_success(self, backend_id: str) -> None:
        self.get(backend_id).record(True)

    def record_failure(self, backend_id: str) -> None:
        self.get(backend_id).record(False)

    def states(self) -> dict[str, BreakerState]:
        return {b: breaker.state for b, breaker in self._breakers.items()}

    def forget(self, keep: set[str]) -> None:
        """Drop breakers of backends no longer in the snapshot."""
        for backend_id in set(self._breakers) - keep:
            del self._breakers[backend_id]

"""Circuit breaker state machine with an injected clock."""
from __future__ import annotations

import asyncio

import pytest

from gateway.traffic.breaker import (CLOSED, HALF_OPEN, OPEN, STATE_CODES, BreakerConfig,
                                      BreakerRegistry, CircuitBreaker)
from tests.gateway.policies.conftest import FakeClock

CONFIG = BreakerConfig(window_s=10, min_requests=4, failure_rate_threshold=0.5,
                       consecutive_failures=3, open_duration_s=5, half_open_max_probes=2,
                       half_open_successes=2)


def run(breaker: CircuitBreaker, ok: bool) -> None:
    permit = breaker.try_acquire()
    assert permit is not None
    with permit:
        permit.success() if ok else permit.failure()


@pytest.fixture
def changes() -> list[tuple[str, str, str]]:
    return []


@pytest.fixture
def breaker(clock: FakeClock, changes) -> CircuitBreaker:
    return CircuitBreaker("b1", CONFIG, on_state_change=lambda *c: changes.append(c),
                          clock=clock)


def test_opens_on_failure_rate_then_half_opens_and_recovers(breaker, clock, changes):
    for ok in (True, False, True, False):      # 50 % of 4 requests
        run(breaker, ok)
    assert breaker.state == OPEN and not breaker.is_available()
    assert breaker.try_acquire() is None
    clock.advance(4.9)
    assert breaker.state == OPEN
    clock.advance(0.2)
    assert breaker.state == HALF_OPEN and breaker.is_available()
    probes = [breaker.try_acquire(), breaker.try_acquire()]
    assert None not in probes and breaker.try_acquire() is None    # probe limit
    assert not breaker.is_available()
    for probe in probes:
        probe.success()
        probe.close()
    assert breaker.state == CLOSED
    assert changes == [("b1", CLOSED, OPEN), ("b1", OPEN, HALF_OPEN), ("b1", HALF_OPEN, CLOSED)]


def test_below_min_requests_rate_does_not_open(breaker):
    run(breaker, True)
    run(breaker, False)
    assert breaker.state == CLOSED     # 50 % but only 2 requests


def test_consecutive_failures_open(breaker):
    for _ in range(5):
        run(breaker, True)
    for _ in range(3):
        run(breaker, False)            # 3/8 < 50 %, but three in a row
    assert breaker.state == OPEN


def test_old_outcomes_leave_the_window(breaker, clock):
    run(breaker, False)
    run(breaker, False)
    clock.advance(11)
    run(breaker, True)
    run(breaker, False)
    run(breaker, True)
    assert breaker.state == CLOSED and breaker.failure_rate() == pytest.approx(1 / 3)


def test_probe_failure_reopens(breaker, clock):
    for _ in range(3):
        run(breaker, False)
    clock.advance(5)
    run(breaker, False)
    assert breaker.state == OPEN
    clock.advance(5)
    assert breaker.state == HALF_OPEN


def test_exceptions_fail_cancellation_is_neutral(breaker, clock):
    for _ in range(3):
        run(breaker, False)
    clock.advance(5)
    permit = breaker.try_acquire()
    with pytest.raises(asyncio.CancelledError):
        with permit:
            raise asyncio.CancelledError
    assert breaker.state == HALF_OPEN and breaker.is_available()   # probe slot freed
    with pytest.raises(RuntimeError):
        with breaker.try_acquire():
            raise RuntimeError("connection reset")
    assert breaker.state == OPEN


def test_stale_permits_are_ignored(breaker, clock):
    early = breaker.try_acquire()               # sent while closed
    for _ in range(3):
        run(breaker, False)
    clock.advance(5)
    assert breaker.state == HALF_OPEN
    early.failure()
    early.close()                               # a late result from before opening
    assert breaker.state == HALF_OPEN


def test_registry_states_for_metrics(clock):
    registry = BreakerRegistry(CONFIG, clock=clock)
    for _ in range(3):
        run(registry.get("a"), False)
    run(registry.get("b"), True)
    assert registry.states() == {"a": OPEN, "b": CLOSED}
    assert STATE_CODES[registry.states()["a"]] == 2    # the worst state has the highest code
    registry.forget({"b"})
    assert registry.states() == {"b": CLOSED}


def test_bad_config():
    with pytest.raises(ValueError):
        BreakerConfig(failure_rate_threshold=0)


def test_registry_shorthands_by_backend_id(clock):
    registry = BreakerRegistry(CONFIG, clock=clock)
    for _ in range(3):
        registry.record_failure("a")
    assert not registry.allow("a") and registry.try_acquire("a") is None
    clock.advance(5)
    assert registry.allow("a")
    registry.record_success("a")
    registry.record_success("a")
    assert registry.states()["a"] == CLOSED

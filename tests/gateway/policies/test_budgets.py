"""USD budgets: worst-case holds, settlement, calendar periods, the SQL floor, outages."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from gateway.limits import (Budget, InMemorySpendTracker, Prices, RedisSpendTracker,
                            period_bounds)

NOW = datetime(2026, 11, 30, 15, 20, tzinfo=timezone.utc)  # a Monday


@pytest.fixture(params=["memory", "redis"])
async def spend(request, redis_client, redis_prefix):
    if request.param == "memory":
        return InMemorySpendTracker()
    return RedisSpendTracker(redis_client, prefix=redis_prefix)


async def test_hold_is_the_worst_case_and_settles_to_the_real_cost(spend):
    key, team = Budget("key", "k", max_usd=1.0), Budget("team", "t", max_usd=None)
    first, refused = await spend.reserve([key, team], 0.6, NOW)
    assert refused is None and await spend.spent(key, NOW) == pytest.approx(0.6)
    _, refused = await spend.reserve([key, team], 0.6, NOW)  # 1.2 could overshoot 1.0
    assert refused.reason == "budget" and refused.tripped == "key:budget"
    assert "$0.4000 left" in refused.message and "lower max_tokens" in refused.message
    await spend.settle(first, 0.25)                           # the request cost less
    await spend.settle(first, 5.0)                            # settling twice changes nothing
    assert await spend.spent(key, NOW) == pytest.approx(0.25)
    second, refused = await spend.reserve([key, team], 0.6, NOW)
    assert refused is None
    await spend.settle(second, 0.0)                           # released: refused downstream
    assert await spend.spent(key, NOW) == pytest.approx(0.25)
    assert await spend.spent(team, NOW) == pytest.approx(0.25)  # unlimited, still tracked


async def test_a_spent_budget_refuses_even_free_requests(spend):
    key = Budget("key", "k2", max_usd=0.5)
    hold, _ = await spend.reserve([key], 0.0, NOW)
    await spend.settle(hold, Prices(in_per_1k=0.5, out_per_1k=1.5).cost(400, 200))  # 0.5
    _, refused = await spend.reserve([key], 0.0, NOW)
    assert refused is not None and "is spent" in refused.message


async def test_concurrent_reservations_never_overshoot(spend):
    key = Budget("key", "k3", max_usd=1.0)
    results = await asyncio.gather(*(spend.reserve([key], 0.1, NOW) for _ in range(40)))
    admitted = [hold for hold, refused in results if refused is None]
    assert len(admitted) == 10
    assert await spend.spent(key, NOW) == pytest.approx(1.0)


async def test_period_budget_resets_when_the_period_turns(spend):
    key = Budget("key", "k4", max_usd=1.0, period="day")
    hold, _ = await spend.reserve([key], 1.0, NOW)
    await spend.settle(hold, 1.0)
    _, refused = await spend.reserve([key], 0.01, NOW)
    assert refused is not None and "resets at 2026-12-01T00:00:00Z" in refused.message
    assert refused.headers()["retry-after"] == str(int((8 * 60 + 40) * 60))
    tomorrow = NOW + timedelta(days=1)
    assert await spend.spent(key, tomorrow) == 0.0
    hold, refused = await spend.reserve([key], 0.5, tomorrow)
    assert refused is None


async def test_lifetime_budget_starts_from_the_spend_sql_recorded(spend):
    key = Budget("key", "k5", max_usd=5.0, recorded_usd=4.9)
    hold, refused = await spend.reserve([key], 0.05, NOW)
    assert refused is None and await spend.spent(key, NOW) == pytest.approx(4.95)
    _, refused = await spend.reserve([key], 0.1, NOW)
    assert refused is not None


def test_period_bounds_are_utc_calendar_periods():
    assert period_bounds("hour", NOW) == (NOW.replace(minute=0), NOW.replace(hour=16, minute=0))
    week = period_bounds("week", datetime(2026, 12, 3, 9, tzinfo=timezone.utc))
    assert week[0] == datetime(2026, 11, 30, tzinfo=timezone.utc) and week[1].day == 7
    december = period_bounds("month", datetime(2026, 12, 31, 23, tzinfo=timezone.utc))
    assert december == (datetime(2026, 12, 1, tzinfo=timezone.utc),
                        datetime(2027, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="budget period"):
        period_bounds("fortnight", NOW)


async def test_budget_store_down_modes(closed_port_url):
    budgets = [Budget("key", "k", max_usd=1.0)]
    open_tracker = RedisSpendTracker(closed_port_url, fail_mode="fail_open")
    closed_tracker = RedisSpendTracker(closed_port_url, fail_mode="fail_closed")
    hold, refused = await open_tracker.reserve(budgets, 0.1)
    assert hold is None and refused is None
    _, refused = await closed_tracker.reserve(budgets, 0.1)
    assert refused.reason == "unavailable"
    await open_tracker.settle(hold, 1.0)                      # nothing held, no raise
    await open_tracker.close()
    await closed_tracker.close()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_hold_never_settled_expires_and_frees_the_budget(kind, redis_client, redis_prefix):
    """The gateway holding it died: after hold_ttl_s the hold stops counting; settled spend
    stays, and a late settle of the expired hold still charges its real cost."""
    clock = [1000.0]
    spend = InMemorySpendTracker(hold_ttl_s=30, clock=lambda: clock[0]) if kind == "memory" \
        else RedisSpendTracker(redis_client, prefix=redis_prefix, hold_ttl_s=30,
                               clock=lambda: clock[0])
    key = Budget("key", f"dead-{kind}", max_usd=1.0)
    orphan, _ = await spend.reserve([key], 0.7, NOW)
    live, _ = await spend.reserve([key], 0.2, NOW)
    _, refused = await spend.reserve([key], 0.2, NOW)
    assert refused is not None and await spend.spent(key, NOW) == pytest.approx(0.9)
    await spend.settle(live, 0.1)
    clock[0] += 31                                            # the orphan's hold expired
    assert await spend.spent(key, NOW) == pytest.approx(0.1)
    again, refused = await spend.reserve([key], 0.8, NOW)
    assert refused is None
    await spend.settle(orphan, 0.05)                          # the request did finish after all
    await spend.settle(again, 0.0)
    assert await spend.spent(key, NOW) == pytest.approx(0.15)

"""Rate limits (RPM/TPM per key, team, model and global) and USD budgets.

Pick the backend with `create_rate_limiter` / `create_spend_tracker`: a Redis URL gives limits
shared by every gateway replica; without one, the worker processes of one gateway share the
store their supervisor serves (`INFERPLANE_LIMITS_SOCKET`, see gateway.limits.shared), and a
single process keeps its limits in memory.
"""
from __future__ import annotations

import os

from common.budget_periods import PERIODS, period_bounds
from gateway.limits.base import RateLimiter
from gateway.limits.budget import (DEFAULT_HOLD_TTL_S, Budget, BudgetHold, InMemorySpendTracker,
                                   Prices, SpendTracker)
from gateway.limits.memory import InMemoryRateLimiter
from gateway.limits.outage import FailMode
from gateway.limits.redis_budget import RedisSpendTracker
from gateway.limits.redis_limiter import RedisRateLimiter
from gateway.limits.shared import SOCKET_ENV, SharedRateLimiter, SharedSpendTracker
from gateway.limits.tokens import TokenEstimator, reservation_tokens
from gateway.limits.types import Decision, Limit, Reservation, format_duration


def create_rate_limiter(redis_url: str | None, fail_mode: FailMode = "fail_open",
                        prefix: str = "inferplane:{rl}:") -> RateLimiter:
    if redis_url:
        return RedisRateLimiter(redis_url, prefix=prefix, fail_mode=fail_mode)
    if shared := os.environ.get(SOCKET_ENV):
        return SharedRateLimiter(shared)
    return InMemoryRateLimiter()


def create_spend_tracker(redis_url: str | None, fail_mode: FailMode = "fail_open",
                         prefix: str = "inferplane:{rl}:",
                         hold_ttl_s: float = DEFAULT_HOLD_TTL_S) -> SpendTracker:
    if redis_url:
        return RedisSpendTracker(redis_url, prefix=prefix, fail_mode=fail_mode,
                                 hold_ttl_s=hold_ttl_s)
    if shared := os.environ.get(SOCKET_ENV):
        return SharedSpendTracker(shared, hold_ttl_s=hold_ttl_s)
    return InMemorySpendTracker(hold_ttl_s=hold_ttl_s)


__all__ = [
    "PERIODS", "Budget", "BudgetHold", "Decision", "FailMode", "InMemoryRateLimiter", "InMemorySpendTracker", "Limit",
    "Prices", "RateLimiter", "RedisRateLimiter", "RedisSpendTracker", "Reservation",
    "SpendTracker", "TokenEstimator", "create_rate_limiter", "create_spend_tracker",
    "format_duration", "period_bounds", "reservation_tokens",
]

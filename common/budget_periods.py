"""The calendar periods a budget counts in (UTC; weeks start on Monday).

    start, end = period_bounds("month", datetime.now(timezone.utc))    # [start, end)
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from common.vocabulary import BudgetPeriod, values

PERIODS = values(BudgetPeriod)


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the UTC calendar period that holds `now`; weeks start on Monday."""
    now = now.astimezone(timezone.utc)
    if period == "hour":
        start = now.replace(minute=0, second=0, microsecond=0)
        return start, start + timedelta(hours=1)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
        return start, end
    raise ValueError(f"budget period must be one of {PERIODS}, got {period!r}")

"""The budget section of a key's or team's admin view: limit, period, and what it has spent.

Spend comes from the usage buckets the gateways write in batches (seconds behind the live
counters the gateway enforces with); a lifetime budget reads the row's running total.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy.orm import Session

from common.budget_periods import period_bounds
from registry.access_queries import spend_since


def budget_status(session: Session, row, *, key_id: int | None = None,
                  team: str | None = None, now: datetime | None = None) -> dict:
    period = row.budget_period
    if period is None:
        spent, start, end = row.spend or 0.0, None, None
    else:
        start, end = period_bounds(period, now or datetime.now(timezone.utc))
        spent = spend_since(session, start, key_id=key_id, team=team)
    limit = row.max_budget
    return {"max_usd": limit, "period": period,
            "period_start": start.isoformat() if start else None,
            "resets_at": end.isoformat() if end else None, "spent_usd": round(spent, 6),
            "remaining_usd": None if limit is None else round(max(0.0, limit - spent), 6)}

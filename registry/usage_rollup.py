"""Hourly usage rollup: the per-minute `usage` buckets summed per (hour, key, team, model), kept
in step by the usage sink so a month of usage is ~700 rows per key and model instead of ~43,000.

    add_to_hourly(session, records)   # same batch the sink gives record_usage
    rebuild_hourly(session)           # recompute from `usage` (migration backfill, benchmarks)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint, delete, func, \
    insert, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from registry.access_queries import ADDITIVE, UsageRecord
from registry.models import Base, Usage


class UsageHourly(Base):
    __tablename__ = "usage_hourly"
    __table_args__ = (UniqueConstraint("hour_start", "key_id", "team", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    hour_start: Mapped[datetime] = mapped_column(index=True)
    key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    team: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    requests: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)


def hour_of(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def add_to_hourly(session: Session, records: Iterable[UsageRecord]) -> None:
    """Add a batch of per-minute records into their hourly rows (one upsert per group)."""
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0] * len(ADDITIVE))
    for rec in records:
        acc = sums[(hour_of(rec.bucket_start), rec.key_id, rec.team, rec.model)]
        for i, field in enumerate(ADDITIVE):
            acc[i] += getattr(rec, field)
    for (hour, key_id, team, model), acc in sums.items():
        row = session.scalar(select(UsageHourly).where(
            UsageHourly.hour_start == hour, UsageHourly.model == model,
            _is(UsageHourly.key_id, key_id), _is(UsageHourly.team, team)))
        if row is None:
            row = UsageHourly(hour_start=hour, key_id=key_id, team=team, model=model,
                              **{f: 0 for f in ADDITIVE})
            session.add(row)
        for i, field in enumerate(ADDITIVE):
            setattr(row, field, getattr(row, field) + acc[i])
    session.flush()


def _is(column, value):
    # NULL never equals NULL in SQL: JWT principals have no key, some keys no team.
    return column.is_(None) if value is None else column == value


def hour_expr(column, dialect: str):
    """The SQL hour of a timestamp column, in the form each database stores datetimes."""
    if dialect == "sqlite":
        return func.strftime("%Y-%m-%d %H:00:00.000000", column)
    return func.date_trunc("hour", column)


def rebuild_hourly(session: Session) -> int:
    """Replace the rollup with sums over `usage`; returns the number of hourly rows."""
    hour = hour_expr(Usage.bucket_start, session.get_bind().dialect.name).label("hour_start")
    sums = [func.sum(getattr(Usage, f)).label(f) for f in ADDITIVE]
    source = select(hour, Usage.key_id, Usage.team, Usage.model, *sums).group_by(
        hour, Usage.key_id, Usage.team, Usage.model)
    session.execute(delete(UsageHourly))
    session.execute(insert(UsageHourly).from_select(
        ["hour_start", "key_id", "team", "model", *ADDITIVE], source))
    return session.scalar(select(func.count()).select_from(UsageHourly))


__all__ = ["UsageHourly", "add_to_hourly", "hour_expr", "hour_of", "rebuild_hourly"]

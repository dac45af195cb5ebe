"""Usage accounting: per-minute `usage` buckets per (key, model), which the gateway's batches
add into, and their hourly and per-UTC-day rollups per (key, team, model), kept in step by the
usage sink (queries in registry.access_queries and registry.usage_rollup)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from registry.orm.base import Base


class UsageSums:
    """The per-(key, team, model) sums shared by `usage` and its hourly and daily rollups."""

    key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    team: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    requests: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_hits: Mapped[int] = mapped_column(Integer, default=0)  # answered by the response cache
    cost: Mapped[float] = mapped_column(Float, default=0.0)


class Usage(UsageSums, Base):
    """One row per (time bucket, key, model); the gateway's batches add into it."""

    __tablename__ = "usage"
    __table_args__ = (UniqueConstraint("bucket_start", "key_id", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(index=True)


class _Rollup(UsageSums):
    """A rollup row: the usage sums for the hour or UTC day that `start` opens."""

    id: Mapped[int] = mapped_column(primary_key=True)
    start: Mapped[datetime] = mapped_column(index=True)


class UsageHourly(_Rollup, Base):
    __tablename__ = "usage_hourly"
    __table_args__ = (UniqueConstraint("start", "key_id", "team", "model"),)


class UsageDaily(_Rollup, Base):
    __tablename__ = "usage_daily"
    __table_args__ = (UniqueConstraint("start", "key_id", "team", "model"),)


__all__ = ["Usage", "UsageDaily", "UsageHourly", "UsageSums"]

"""ORM tables for access and accounting: teams, API keys, usage, SLOs, audit, and the
single-row registry_state whose version every change bumps (readers poll it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from common.vocabulary import Priority, Role
from registry.models import (
    BUDGET_PERIODS,
    PRIORITIES,
    ROLES,
    Base,
    Timestamps,
    Versioned,
    one_of,
    utcnow,
)


class Team(Versioned, Timestamps, Base):
    __tablename__ = "teams"
    __table_args__ = (one_of("budget_period", BUDGET_PERIODS),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    rpm_limit: Mapped[int | None] = mapped_column(Integer)
    tpm_limit: Mapped[int | None] = mapped_column(Integer)
    max_budget: Mapped[float | None] = mapped_column(Float)
    budget_period: Mapped[str | None] = mapped_column(String(10))
    spend: Mapped[float] = mapped_column(Float, default=0.0)  # lifetime, charged from usage


class ApiKey(Versioned, Timestamps, Base):
    """Only the sha256 of the secret is stored; `prefix` lets people recognise a key."""

    __tablename__ = "api_keys"
    __table_args__ = (one_of("role", ROLES), one_of("priority", PRIORITIES),
                      one_of("budget_period", BUDGET_PERIODS))

    id: Mapped[int] = mapped_column(primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(20))
    name: Mapped[str] = mapped_column(String(200))
    team: Mapped[str | None] = mapped_column(String(200), index=True)
    role: Mapped[str] = mapped_column(String(20), default=Role.USER.value)
    models: Mapped[list[Any] | None] = mapped_column()
    rpm_limit: Mapped[int | None] = mapped_column(Integer)
    tpm_limit: Mapped[int | None] = mapped_column(Integer)
    max_budget: Mapped[float | None] = mapped_column(Float)
    budget_period: Mapped[str | None] = mapped_column(String(10))
    spend: Mapped[float] = mapped_column(Float, default=0.0)  # lifetime, charged from usage
    priority: Mapped[str] = mapped_column(String(20), default=Priority.STANDARD.value)
    expires_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()


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
    cost: Mapped[float] = mapped_column(Float, default=0.0)


class Usage(UsageSums, Base):
    """One row per (time bucket, key, model); the gateway's batches add into it."""

    __tablename__ = "usage"
    __table_args__ = (UniqueConstraint("bucket_start", "key_id", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(index=True)


class Slo(Versioned, Timestamps, Base):
    __tablename__ = "slos"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(50))  # availability | ttft | latency
    objective: Mapped[float] = mapped_column(Float)  # e.g. 0.999 of requests good
    threshold_ms: Mapped[float | None] = mapped_column(Float)
    window_s: Mapped[int] = mapped_column(Integer, default=30 * 24 * 3600)


class AuditLog(Base):
    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(50))
    resource_type: Mapped[str] = mapped_column(String(50))
    resource_id: Mapped[str] = mapped_column(String(300))
    before: Mapped[dict[str, Any] | None] = mapped_column()
    after: Mapped[dict[str, Any] | None] = mapped_column()
    message: Mapped[str] = mapped_column(Text, default="")


class RegistryState(Base):
    __tablename__ = "registry_state"

    id: Mapped[int] = mapped_column(primary_key=True)  # always 1
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

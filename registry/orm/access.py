"""Access control: teams and API keys (their limits, budgets and lifetime spend). Usage rows
(registry.orm.usage) point at a key by foreign key only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from common.vocabulary import BudgetPeriod, Priority, Role, values
from registry.orm.base import Base, Timestamps, Versioned, one_of

# The CHECK constraints' allowed values (their text is what the migrations created).
ROLES = values(Role)
PRIORITIES = values(Priority)
BUDGET_PERIODS = values(BudgetPeriod)  # UTC calendar periods; NULL = lifetime


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


__all__ = ["BUDGET_PERIODS", "PRIORITIES", "ROLES", "ApiKey", "Team"]

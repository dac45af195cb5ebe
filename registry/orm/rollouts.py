"""Rollouts: a model's gradual move from one version to another (traffic weight by step,
the analysis measurements) and the append-only events of each. The versions are catalogue
rows (registry.orm.catalog); semantics in docs/rollouts.md."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from common.vocabulary import RolloutState, values
from registry.orm.base import Base, Timestamps, Versioned, one_of, utcnow
from registry.orm.catalog import ModelVersion

# The CHECK constraint's allowed values (its text is what the migrations created).
ROLLOUT_STATES = values(RolloutState)


class Rollout(Versioned, Timestamps, Base):
    __tablename__ = "rollouts"
    __table_args__ = (one_of("state", ROLLOUT_STATES),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    from_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"))
    to_version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(20), default=RolloutState.PENDING.value)
    step: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=0.0)
    measurements: Mapped[dict[str, Any]] = mapped_column(default=dict)

    from_version: Mapped[ModelVersion | None] = relationship(foreign_keys=[from_version_id])
    to_version: Mapped[ModelVersion] = relationship(foreign_keys=[to_version_id])
    events: Mapped[list[RolloutEvent]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="RolloutEvent.id")


class RolloutEvent(Base):
    __tablename__ = "rollout_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(50))
    step: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=0.0)
    measurements: Mapped[dict[str, Any]] = mapped_column(default=dict)
    message: Mapped[str] = mapped_column(Text, default="")


__all__ = ["ROLLOUT_STATES", "Rollout", "RolloutEvent"]

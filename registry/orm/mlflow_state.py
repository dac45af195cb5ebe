"""The MLflow sync's common base: what it last saw both registries agree on, per (target,
model, alias); read and written by registry.mlflow_state."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from registry.orm.base import Base, utcnow


class MlflowAliasState(Base):
    __tablename__ = "mlflow_alias_sync"
    __table_args__ = (UniqueConstraint("target", "model_name", "alias"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    # tracking URI + name prefix: one deployment may sync with several MLflow registries.
    target: Mapped[str] = mapped_column(String(500))
    model_name: Mapped[str] = mapped_column(String(200))
    alias: Mapped[str] = mapped_column(String(100))
    version_label: Mapped[str] = mapped_column(String(100))
    synced_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


__all__ = ["MlflowAliasState"]

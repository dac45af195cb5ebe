"""Service-level objectives, per model (or fleet-wide with no model): what fraction of
requests must be good, by availability, time to first token or latency, over a window."""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from registry.orm.base import Base, Timestamps, Versioned


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


__all__ = ["Slo"]

"""Request history: one metadata row per finished request (no prompt or response bodies), for
the console. The usage sink appends them in its batches and prunes past the retention
(registry.request_log)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from registry.orm.base import Base


class RequestLog(Base):
    __tablename__ = "request_log"
    __table_args__ = (Index("ix_request_log_model_id", "model", "id"),
                      Index("ix_request_log_key_id_id", "key_id", "id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    request_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str | None] = mapped_column(String(32))
    key_id: Mapped[int | None] = mapped_column(Integer)  # no FK: history outlives a key
    team: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    version: Mapped[str | None] = mapped_column(String(100))
    backend: Mapped[str | None] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))  # ok | error | aborted
    http_status: Mapped[int] = mapped_column(Integer)
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    cache: Mapped[str | None] = mapped_column(String(10))  # hit | miss | None (not looked up)


__all__ = ["RequestLog"]

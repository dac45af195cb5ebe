"""One metadata row per finished request (no prompt or response bodies), for the console's
request history. The usage sink appends them in its batches and prunes past the retention.

    append_requests(session, rows)            # list of dicts with RequestLog's columns
    prune_requests(session, older_than=dt)    # returns rows deleted
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, Index, Integer, String, delete, insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from registry.models import Base


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


def append_requests(session: Session, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(RequestLog), rows)


def prune_requests(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestLog).where(RequestLog.created_at < older_than)).rowcount


__all__ = ["RequestLog", "append_requests", "prune_requests"]

"""Guardrails and stored bodies: named policies (their spec as JSON, validated by
common.guardrail_spec.PolicySpec), which models and keys use them, and the request/response
bodies kept for models or keys whose policy logs them (pruned past the retention)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from registry.orm.base import Base, Timestamps, Versioned


class GuardrailPolicy(Versioned, Timestamps, Base):
    __tablename__ = "guardrail_policies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column()
    bindings: Mapped[list["GuardrailBinding"]] = relationship(
        back_populates="policy", cascade="all, delete-orphan", passive_deletes=True)


class GuardrailBinding(Timestamps, Base):
    """One model (by name: a binding may precede the model) or one key uses a policy."""
    __tablename__ = "guardrail_bindings"
    __table_args__ = (CheckConstraint("(model IS NULL) <> (key_id IS NULL)",
                                      name="one_target"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    policy_id: Mapped[int] = mapped_column(
        ForeignKey("guardrail_policies.id", ondelete="CASCADE"), index=True)
    model: Mapped[str | None] = mapped_column(String(200), unique=True)
    key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"),
                                               unique=True)
    policy: Mapped[GuardrailPolicy] = relationship(back_populates="bindings")


class RequestBody(Base):
    """A request's bodies after redaction (mode full) or only their sizes and what the
    guardrails found (mode metadata). Written by the usage sink in its batches."""
    __tablename__ = "request_bodies"
    __table_args__ = (Index("ix_request_bodies_request_id", "request_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    request_id: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[int | None] = mapped_column(Integer)  # no FK: kept as long as the log row
    model: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str | None] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(20))  # metadata | full
    request_body: Mapped[str | None] = mapped_column(Text)
    response_body: Mapped[str | None] = mapped_column(Text)
    request_chars: Mapped[int] = mapped_column(Integer, default=0)
    response_chars: Mapped[int] = mapped_column(Integer, default=0)
    request_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    response_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    findings: Mapped[list[Any] | None] = mapped_column()  # [{rule, action, direction, count}]


__all__ = ["GuardrailBinding", "GuardrailPolicy", "RequestBody"]

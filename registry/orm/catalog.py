"""The catalogue: models, their versions, aliases (with their history), LoRA adapters and
the backends that serve them. Rollouts (registry.orm.rollouts) and SLOs (registry.orm.slos)
hang off a model by foreign key; `Model.rollouts` names its class by string, so neither
module needs the other at import time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from common.vocabulary import (BackendState, EngineKind, ModelTask, Tier, VersionKind,
                                VersionStatus, values)
from registry.orm.base import Base, Timestamps, Versioned, one_of, utcnow

# The CHECK constraints' allowed values (their text is what the migrations created).
TIERS = values(Tier)
VERSION_KINDS = values(VersionKind)
VERSION_STATUSES = values(VersionStatus)
TASKS = values(ModelTask)
BACKEND_STATES = values(BackendState)


class Model(Versioned, Timestamps, Base):
    __tablename__ = "models"
    __table_args__ = (one_of("tier", TIERS), one_of("task", TASKS))

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    context_length: Mapped[int | None] = mapped_column(Integer)
    routing: Mapped[str | None] = mapped_column(String(50))  # None: the gateway default
    fallbacks: Mapped[list[Any]] = mapped_column(default=list)
    tier: Mapped[str] = mapped_column(String(10), default=Tier.HOT.value)
    price_in_per_1k: Mapped[float] = mapped_column(Float, default=0.0)
    price_out_per_1k: Mapped[float] = mapped_column(Float, default=0.0)
    # content types the model reads (gateway.request_path.modalities); text-only unless declared
    modalities: Mapped[list[Any]] = mapped_column(default=lambda: ["text"])
    task: Mapped[str] = mapped_column(String(20), default=ModelTask.CHAT.value,
                                      server_default=ModelTask.CHAT.value)
    # response-cache policy (registry.cache_policy.CachePolicy as JSON); None: not cached
    cache: Mapped[dict[str, Any] | None] = mapped_column(default=None)

    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True,
        foreign_keys="ModelVersion.model_id")
    aliases: Mapped[list[Alias]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    backends: Mapped[list[Backend]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    adapters: Mapped[list[Adapter]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    rollouts: Mapped[list[Rollout]] = relationship(  # noqa: F821  (registry.orm.rollouts)
        "Rollout", cascade="all, delete-orphan", passive_deletes=True)


class ModelVersion(Versioned, Timestamps, Base):
    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "label"),
        one_of("kind", VERSION_KINDS),
        one_of("status", VERSION_STATUSES),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    label: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(10), default=VersionKind.FULL.value)
    base_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"))
    source_uri: Mapped[str | None] = mapped_column(Text)
    engine: Mapped[str | None] = mapped_column(String(50))
    engine_args: Mapped[dict[str, Any]] = mapped_column(default=dict)
    precision: Mapped[str | None] = mapped_column(String(20))
    checksum: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(20), default=VersionStatus.REGISTERED.value)

    model: Mapped[Model] = relationship(back_populates="versions", foreign_keys=[model_id])
    base_version: Mapped[ModelVersion | None] = relationship(remote_side=[id])


class Alias(Versioned, Timestamps, Base):
    __tablename__ = "aliases"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))

    version: Mapped[ModelVersion] = relationship()


class AliasHistory(Base):
    """Append-only; survives the alias row so a deleted alias keeps its past."""

    __tablename__ = "alias_history"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_name: Mapped[str] = mapped_column(String(200), index=True)
    alias: Mapped[str] = mapped_column(String(100))
    old_version: Mapped[str | None] = mapped_column(String(100))
    new_version: Mapped[str | None] = mapped_column(String(100))
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(default=utcnow)


class Adapter(Versioned, Timestamps, Base):
    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    base_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"))
    source_uri: Mapped[str | None] = mapped_column(Text)
    rank: Mapped[int | None] = mapped_column(Integer)

    base_version: Mapped[ModelVersion | None] = relationship()


class BackendAdapter(Base):
    """Which adapters are loaded on which backend (drives LoRA-affinity routing)."""

    __tablename__ = "backend_adapters"

    backend_id: Mapped[int] = mapped_column(
        ForeignKey("backends.id", ondelete="CASCADE"), primary_key=True)
    adapter_id: Mapped[int] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), primary_key=True)
    loaded_at: Mapped[datetime] = mapped_column(default=utcnow)


class Backend(Versioned, Timestamps, Base):
    __tablename__ = "backends"
    __table_args__ = (
        UniqueConstraint("model_id", "url", "served_model"),
        one_of("tier", TIERS),
        one_of("state", BACKEND_STATES),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"))
    url: Mapped[str] = mapped_column(String(500))
    engine: Mapped[str] = mapped_column(String(50), default=EngineKind.OPENAI.value)
    served_model: Mapped[str] = mapped_column(String(200), default="")
    gpu_type: Mapped[str | None] = mapped_column(String(50))
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    tier: Mapped[str] = mapped_column(String(10), default=Tier.HOT.value)
    state: Mapped[str] = mapped_column(String(20), default=BackendState.STARTING.value)
    managed: Mapped[bool] = mapped_column(Boolean, default=False)
    command: Mapped[list[Any] | None] = mapped_column(JSON)
    port: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)

    version: Mapped[ModelVersion | None] = relationship()
    adapters: Mapped[list[Adapter]] = relationship(secondary="backend_adapters", viewonly=True)


__all__ = ["BACKEND_STATES", "TIERS", "VERSION_KINDS", "VERSION_STATUSES", "Adapter", "Alias",
           "AliasHistory", "Backend", "BackendAdapter", "Model", "ModelVersion"]

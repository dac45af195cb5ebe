"""SQLAlchemy ORM for the registry: the catalogue (models, versions, aliases, adapters,
backends, rollouts) and access control (teams, keys, usage, SLOs, audit).

Every mutable catalogue row carries `row_version`, SQLAlchemy's version counter: an UPDATE
or DELETE only matches the version it read, so a stale concurrent write fails instead of
silently overwriting (the admin API maps that to 409).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, relationship

from common.vocabulary import (
    BackendState,
    BudgetPeriod,
    EngineKind,
    Priority,
    Role,
    RolloutState,
    Tier,
    VersionKind,
    VersionStatus,
    values,
)

# The CHECK constraints' allowed values (their text is what the migrations created).
TIERS = values(Tier)
VERSION_KINDS = values(VersionKind)
VERSION_STATUSES = values(VersionStatus)
BACKEND_STATES = values(BackendState)
ROLES = values(Role)
PRIORITIES = values(Priority)
BUDGET_PERIODS = values(BudgetPeriod)  # UTC calendar periods; NULL = lifetime
ROLLOUT_STATES = values(RolloutState)

# Deterministic constraint names keep Alembic batch migrations (SQLite table rebuilds) and
# downgrades able to address constraints by name on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=f"{column}_allowed")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Versioned:
    row_version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        return {"version_id_col": cls.__table__.c.row_version}


class Model(Versioned, Timestamps, Base):
    __tablename__ = "models"
    __table_args__ = (one_of("tier", TIERS),)

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

    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True,
        foreign_keys="ModelVersion.model_id")
    aliases: Mapped[list[Alias]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    backends: Mapped[list[Backend]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    adapters: Mapped[list[Adapter]] = relationship(cascade="all, delete-orphan", passive_deletes=True)
    rollouts: Mapped[list[Rollout]] = relationship(cascade="all, delete-orphan", passive_deletes=True)


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


from registry.access_models import (  # noqa: E402  (same metadata, split for file size)
    ApiKey,
    AuditLog,
    RegistryState,
    Slo,
    Team,
    Usage,
)
from registry.mlflow_state import MlflowAliasState  # noqa: E402,F401  (same metadata)
from registry.request_log import RequestLog  # noqa: E402,F401  (same metadata)
from registry.usage_rollup import UsageDaily, UsageHourly  # noqa: E402,F401  (same metadata)

__all__ = [
    "Base", "Model", "ModelVersion", "Alias", "AliasHistory", "Adapter", "BackendAdapter",
    "Backend", "Rollout", "RolloutEvent", "ApiKey", "AuditLog", "RegistryState", "Slo", "Team",
    "Usage", "utcnow",
]

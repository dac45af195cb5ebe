"""Catalogue queries used by the control plane: models, versions, aliases, adapters, backends,
plus the audit trail and the registry_state version that snapshot readers poll.

Functions flush but never commit: the caller owns the transaction, so a change, its audit
row and the version bump land atomically."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from common.error_codes import ErrorCode
from common.vocabulary import VersionKind

# Access-control queries live in their own module; re-exported so callers have one import.
from registry.access_queries import (  # noqa: F401
    create_key,
    create_team,
    get_key,
    get_team,
    record_usage,
    revoke_key,
    rotate_key,
)
from registry.errors import ConflictError, InvalidError, NotFoundError, check_row_version
from registry.named import create_named, get_named
from registry.orm.audit import AuditLog, RegistryState
from registry.orm.base import utcnow
from registry.orm.catalog import (Adapter, Alias, AliasHistory, Backend, BackendAdapter, Model,
                                  ModelVersion)

# --- registry state + audit -------------------------------------------------------------

def get_snapshot_version(session: Session) -> int:
    version = session.scalar(select(RegistryState.version).where(RegistryState.id == 1))
    return int(version or 0)


def bump_snapshot_version(session: Session) -> int:
    """Increment the version readers poll; call last in a write transaction (it row-locks)."""
    result = session.execute(
        update(RegistryState).where(RegistryState.id == 1)
        .values(version=RegistryState.version + 1, updated_at=utcnow()))
    if result.rowcount == 0:  # a schema made by create_all() rather than the migration
        session.add(RegistryState(id=1, version=1))
        session.flush()
        return 1
    return get_snapshot_version(session)


def audit(session: Session, actor: str, action: str, resource_type: str, resource_id: Any,
          before: dict | None = None, after: dict | None = None, message: str = "") -> AuditLog:
    entry = AuditLog(actor=actor, action=action, resource_type=resource_type,
                     resource_id=str(resource_id), before=before, after=after, message=message)
    session.add(entry)
    return entry


# --- models + versions ------------------------------------------------------------------

def get_model(session: Session, name: str) -> Model:
    return get_named(session, Model, name, "model")


def create_model(session: Session, name: str, **fields: Any) -> Model:
    return create_named(session, Model, name, "model", **fields)


def upsert_model(session: Session, name: str, **fields: Any) -> tuple[Model, bool]:
    """Create the model or update the given fields; returns (model, created)."""
    model = session.scalar(select(Model).where(Model.name == name))
    if model is None:
        return create_model(session, name, **fields), True
    for key, value in fields.items():
        setattr(model, key, value)
    session.flush()
    return model, False


def get_version(session: Session, model: Model, label: str) -> ModelVersion:
    version = session.scalar(select(ModelVersion).where(
        ModelVersion.model_id == model.id, ModelVersion.label == label))
    if version is None:
        raise NotFoundError(f"model '{model.name}' has no version '{label}'", param="version")
    return version


def add_version(session: Session, model: Model, label: str, *, kind: str = VersionKind.FULL,
                base_version: str | None = None, **fields: Any) -> ModelVersion:
    exists = session.scalar(select(ModelVersion.id).where(
        ModelVersion.model_id == model.id, ModelVersion.label == label))
    if exists is not None:
        raise ConflictError(f"model '{model.name}' already has version '{label}'",
                            param="version", code=ErrorCode.ALREADY_EXISTS)
    if kind == VersionKind.LORA and not base_version:
        raise InvalidError("a lora version needs base_version", param="base_version")
    if kind == VersionKind.FULL and base_version:
        raise InvalidError("only lora versions have a base_version", param="base_version")
    base = _base_version(session, model, base_version)
    version = ModelVersion(model_id=model.id, label=label, kind=kind,
                           base_version_id=base.id if base else None, **fields)
    session.add(version)
    session.flush()
    return version


def _base_version(session: Session, model: Model, label: str | None) -> ModelVersion | None:
    if not label:
        return None
    try:
        return get_version(session, model, label)
    except NotFoundError as exc:
        raise InvalidError(exc.message, param="base_version") from None


# --- aliases ----------------------------------------------------------------------------

def get_alias(session: Session, model: Model, name: str) -> Alias:
    alias = session.scalar(select(Alias).where(Alias.model_id == model.id, Alias.name == name))
    if alias is None:
        raise NotFoundError(f"model '{model.name}' has no alias '{name}'", param="alias")
    return alias


def set_alias(session: Session, model: Model, name: str, version_label: str, actor: str,
              expected_row_version: int | None = None) -> tuple[Alias, str | None, bool]:
    """Point alias → version, recording history. Returns (alias, previous label, created).

    expected_row_version=0 means "create only"; any other number must match the row."""
    target = get_version(session, model, version_label)
    alias = session.scalar(select(Alias).where(Alias.model_id == model.id, Alias.name == name))
    if alias is None:
        if expected_row_version not in (None, 0):
            raise ConflictError(f"alias '{name}' does not exist (expected row_version "
                                f"{expected_row_version})", code=ErrorCode.ROW_VERSION_MISMATCH)
        alias = Alias(model_id=model.id, name=name, version_id=target.id)
        session.add(alias)
        previous, created = None, True
    else:
        if expected_row_version == 0:
            raise ConflictError(f"alias '{name}' already exists", code=ErrorCode.ROW_VERSION_MISMATCH)
        check_row_version(alias, expected_row_version, f"alias '{name}'")
        previous, created = alias.version.label, False
        alias.version_id = target.id
    session.add(AliasHistory(model_name=model.name, alias=name, old_version=previous,
                             new_version=target.label, actor=actor))
    session.flush()
    session.refresh(alias, ["version"])
    return alias, previous, created


def delete_alias(session: Session, model: Model, name: str, actor: str,
                 expected_row_version: int | None = None) -> Alias:
    alias = get_alias(session, model, name)
    check_row_version(alias, expected_row_version, f"alias '{name}'")
    session.add(AliasHistory(model_name=model.name, alias=name, old_version=alias.version.label,
                             new_version=None, actor=actor))
    session.delete(alias)
    session.flush()
    return alias


# --- adapters ---------------------------------------------------------------------------

def get_adapter(session: Session, model: Model, name: str) -> Adapter:
    adapter = session.scalar(select(Adapter).where(
        Adapter.model_id == model.id, Adapter.name == name))
    if adapter is None:
        raise NotFoundError(f"model '{model.name}' has no adapter '{name}'", param="adapter")
    return adapter


def add_adapter(session: Session, model: Model, name: str, *, base_version: str | None = None,
                **fields: Any) -> Adapter:
    if session.scalar(select(Adapter.id).where(
            Adapter.model_id == model.id, Adapter.name == name)) is not None:
        raise ConflictError(f"model '{model.name}' already has adapter '{name}'",
                            param="name", code=ErrorCode.ALREADY_EXISTS)
    base = _base_version(session, model, base_version)
    adapter = Adapter(model_id=model.id, name=name, base_version_id=base.id if base else None,
                      **fields)
    session.add(adapter)
    session.flush()
    return adapter


def attach_adapter(session: Session, backend: Backend, adapter: Adapter) -> bool:
    """Mark the adapter loaded on the backend; False when it already was."""
    if adapter.model_id != backend.model_id:
        raise InvalidError(f"backend {backend.id} does not serve the adapter's model",
                           param="backend_id")
    if session.get(BackendAdapter, (backend.id, adapter.id)) is not None:
        return False
    session.add(BackendAdapter(backend_id=backend.id, adapter_id=adapter.id))
    session.flush()
    session.expire(backend, ["adapters"])
    return True


def detach_adapter(session: Session, backend: Backend, adapter: Adapter) -> bool:
    link = session.get(BackendAdapter, (backend.id, adapter.id))
    if link is None:
        return False
    session.delete(link)
    session.flush()
    session.expire(backend, ["adapters"])
    return True


# --- backends ---------------------------------------------------------------------------

def get_backend(session: Session, backend_id: int) -> Backend:
    backend = session.get(Backend, backend_id)
    if backend is None:
        raise NotFoundError(f"backend {backend_id} does not exist", param="backend_id")
    return backend


def add_backend(session: Session, model_name: str, url: str, *, version: str | None = None,
                served_model: str | None = None, **fields: Any) -> Backend:
    model = get_model(session, model_name)
    version_row = get_version(session, model, version) if version else None
    served = served_model if served_model is not None else model_name
    duplicate = session.scalar(select(Backend.id).where(
        Backend.model_id == model.id, Backend.url == url, Backend.served_model == served))
    if duplicate is not None:
        raise ConflictError(f"backend {duplicate} already serves '{served}' at {url} for "
                            f"model '{model_name}'", param="url", code=ErrorCode.ALREADY_EXISTS)
    backend = Backend(model_id=model.id, url=url, served_model=served,
                      version_id=version_row.id if version_row else None, **fields)
    session.add(backend)
    session.flush()
    return backend


def set_backend_state(session: Session, backend_id: int, state: str,
                      error: str | None = None) -> tuple[Backend, bool]:
    """Returns (backend, changed) so health checkers bump the snapshot only on a real change."""
    backend = get_backend(session, backend_id)
    if backend.state == state and backend.last_error == error:
        return backend, False
    backend.state = state
    backend.last_error = error
    session.flush()
    return backend, True


def list_backends(session: Session, model_name: str | None = None,
                  state: str | None = None) -> list[Backend]:
    stmt = select(Backend).order_by(Backend.id)
    if model_name is not None:
        stmt = stmt.join(Model).where(Model.name == model_name)
    if state is not None:
        stmt = stmt.where(Backend.state == state)
    return list(session.scalars(stmt))

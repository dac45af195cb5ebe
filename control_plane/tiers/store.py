"""Registry reads and writes the tier manager makes (synchronous: run them in a thread).

Every write bumps the snapshot version in the same transaction, so pollers on other
replicas pick the change up; the caller also calls its `on_change()` for this process.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from common.error_codes import ErrorCode
from common.errors import InferplaneError
from common.vocabulary import BackendState, EngineKind
from registry.orm.catalog import Adapter, Backend, BackendAdapter, Model
from registry.queries import attach_adapter, bump_snapshot_version, detach_adapter


class TierError(InferplaneError):
    """A tier operation that cannot be done; `status` is the HTTP status it maps to."""

    status, code = 400, ErrorCode.TIER_ERROR


class UnknownModel(TierError):
    status, code = 404, ErrorCode.MODEL_NOT_FOUND


class UnknownAdapter(TierError):
    status, code = 404, ErrorCode.ADAPTER_NOT_FOUND


@dataclass(frozen=True)
class BackendRow:
    id: int
    url: str
    engine: str
    state: str
    managed: bool


def model_tiers(sessions: sessionmaker[Session]) -> dict[str, str]:
    with sessions() as session:
        return dict(session.execute(select(Model.name, Model.tier)).all())


def model_tier(sessions: sessionmaker[Session], name: str) -> str:
    with sessions() as session:
        tier = session.scalar(select(Model.tier).where(Model.name == name))
    if tier is None:
        raise UnknownModel(f"model '{name}' does not exist")
    return tier


def set_model_tier(sessions: sessionmaker[Session], name: str, tier: str) -> None:
    """Move a model (and its backends' tier labels) to `tier`."""
    with sessions.begin() as session:
        model = _model(session, name)
        model.tier = tier
        for backend in model.backends:
            backend.tier = tier
        bump_snapshot_version(session)


def backends_of(sessions: sessionmaker[Session], name: str) -> list[BackendRow]:
    with sessions() as session:
        model = _model(session, name)
        return [BackendRow(b.id, b.url, b.engine, b.state, b.managed)
                for b in sorted(model.backends, key=lambda b: b.id)]


def add_managed_backend(sessions: sessionmaker[Session], name: str, url: str,
                        command: list[str], port: int, engine: str = EngineKind.BUILTIN) -> int:
    """The registry row for an engine of kind `engine` about to start (state `starting`)."""
    with sessions.begin() as session:
        model = _model(session, name)
        stale = session.scalar(select(Backend).where(Backend.model_id == model.id,
                                                      Backend.url == url))
        if stale is not None:  # a row an earlier engine on this port left behind
            session.delete(stale)
            session.flush()
        row = Backend(model_id=model.id, url=url, engine=engine, served_model=name,
                      tier=model.tier, state=BackendState.STARTING, managed=True, command=command,
                      port=port)
        session.add(row)
        session.flush()
        bump_snapshot_version(session)
        return row.id


def remove_backend(sessions: sessionmaker[Session], url: str) -> bool:
    """Drop a managed engine's row (its adapter links go with it: ON DELETE CASCADE)."""
    with sessions.begin() as session:
        rows = session.scalars(select(Backend).where(Backend.url == url,
                                                     Backend.managed.is_(True))).all()
        for row in rows:
            session.delete(row)
        if rows:
            bump_snapshot_version(session)
        return bool(rows)


def adapter_source(sessions: sessionmaker[Session], model: str, adapter: str) -> str:
    with sessions() as session:
        row = _adapter(session, model, adapter)
        if not row.source_uri:
            raise UnknownAdapter(f"adapter '{adapter}' of model '{model}' has no source_uri to "
                                 "load it from")
        return row.source_uri


def set_adapter_loaded(sessions: sessionmaker[Session], model: str, backend_url: str,
                       adapter: str, loaded: bool) -> bool:
    """Record (or clear) the BackendAdapter link; True when it changed."""
    with sessions.begin() as session:
        row = _adapter(session, model, adapter)
        backend = session.scalar(select(Backend).where(Backend.model_id == row.model_id,
                                                       Backend.url == backend_url))
        if backend is None:
            return False
        changed = (attach_adapter if loaded else detach_adapter)(session, backend, row)
        if changed:
            bump_snapshot_version(session)
        return changed


def clear_adapters(sessions: sessionmaker[Session], backend_url: str) -> bool:
    """Forget every adapter recorded on the engine at `backend_url` (it restarted)."""
    with sessions.begin() as session:
        ids = list(session.scalars(select(Backend.id).where(Backend.url == backend_url)))
        links = list(session.scalars(select(BackendAdapter)
                                     .where(BackendAdapter.backend_id.in_(ids)))) if ids else []
        for link in links:
            session.delete(link)
        if links:
            bump_snapshot_version(session)
        return bool(links)


def _model(session: Session, name: str) -> Model:
    model = session.scalar(select(Model).where(Model.name == name))
    if model is None:
        raise UnknownModel(f"model '{name}' does not exist")
    return model


def _adapter(session: Session, model: str, adapter: str) -> Adapter:
    row = session.scalar(select(Adapter).join(Model, Model.id == Adapter.model_id)
                         .where(Model.name == model, Adapter.name == adapter))
    if row is None:
        raise UnknownAdapter(f"model '{model}' has no adapter '{adapter}'")
    return row

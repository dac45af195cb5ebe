"""First-start set-up for `inferplane up`: the admin key and the configured models/backends."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from common.auth import keys as keyring
from common.vocabulary import BackendState, Role, Tier
from control_plane.settings import ModelSpec, Settings
from control_plane.supervisor import EngineSpec, free_port
from registry.access_queries import create_key
from registry.orm.access import ApiKey
from registry.orm.catalog import Backend, Model
from registry.queries import bump_snapshot_version as bump_version
from registry.queries import set_backend_state as set_state
from registry.queries import upsert_model

ADMIN_KEY_NAME = "admin"


def ensure_admin_key(sessions: sessionmaker, data_dir: Path) -> tuple[str, bool]:
    """The admin key: INFERPLANE_ADMIN_KEY, else data_dir/admin.key, else a new one (created=True).
    Only its hash is stored; the file is mode 0600."""
    key_file = data_dir / "admin.key"
    secret = os.environ.get("INFERPLANE_ADMIN_KEY") or (
        key_file.read_text().strip() if key_file.exists() else None)
    created = secret is None
    if created:
        secret = keyring.generate_key()
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
    with sessions.begin() as session:
        digest = keyring.hash_key(secret)
        if session.scalar(select(ApiKey).where(ApiKey.key_hash == digest)) is None:
            create_key(session, ADMIN_KEY_NAME, role=Role.ADMIN, secret=secret)
            bump_version(session)
    return secret, created


def _upsert_model(session: Session, spec: ModelSpec) -> Model:
    fields = dict(tier=spec.tier, fallbacks=list(spec.fallbacks),
                  price_in_per_1k=spec.price_in_per_1k, price_out_per_1k=spec.price_out_per_1k,
                  modalities=list(spec.modalities), task=spec.task,
                  cache=spec.cache.model_dump() if spec.cache else None)
    if spec.context_length:
        fields["context_length"] = spec.context_length
    if spec.routing:
        fields["routing"] = spec.routing
    return upsert_model(session, spec.name, **fields)[0]


def register_models(sessions: sessionmaker, settings: Settings) -> list[EngineSpec]:
    """Write the configured models and backends; return the hot models' engines (builtin or
    vllm) to start. Managed backends from an earlier run are replaced (their ports may differ
    now)."""
    from control_plane.tiers.config import (  # the tiers package imports this module
        EngineTemplate,
        startable,
    )

    specs: list[EngineSpec] = []
    port = settings.engine_port_base
    with sessions.begin() as session:
        for spec in settings.models:
            model = _upsert_model(session, spec)
            for old in [b for b in model.backends if b.managed or spec.backends]:
                session.delete(old)
            session.flush()
            for b in spec.backends:
                session.add(Backend(model_id=model.id, url=b.url.rstrip("/"), engine=b.engine,
                                    served_model=b.served_model or spec.name, gpu_type=b.gpu,
                                    weight=b.weight, tier=spec.tier, state=BackendState.READY, managed=False))
            if startable(spec) and spec.tier == Tier.HOT:
                template = EngineTemplate.of(spec)
                for _ in range(template.replicas):
                    port = free_port(preferred=port) + 1
                    engine = template.spec(spec.name, port - 1)
                    specs.append(engine)
                    session.add(Backend(model_id=model.id, url=engine.url,
                                        engine=engine.engine, served_model=spec.name,
                                        tier=spec.tier, state=BackendState.STARTING,
                                        managed=True, command=engine.command(), port=engine.port))
        bump_version(session)
    return specs


def set_backend_state(sessions: sessionmaker, url: str, state: str, error: str | None = None) -> bool:
    """The supervisor's report on the managed engine at `url`: sets its managed rows only (an
    unmanaged row registered at the same URL keeps the state its own health probes give it).
    Returns True when the state changed (and the snapshot version was bumped)."""
    with sessions.begin() as session:
        ids = session.scalars(select(Backend.id).where(Backend.url == url,
                                                       Backend.managed.is_(True))).all()
        changed = [set_state(session, backend_id, state, error)[1] for backend_id in ids]
        if any(changed):
            bump_version(session)
        return any(changed)


def create_key_cli(settings: Settings, args: argparse.Namespace) -> int:
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    url = settings.resolved_database_url()
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    upgrade(url, progress=None)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    with make_session_factory(url).begin() as session:
        _, secret = create_key(session, args.name, role=args.role, team=args.team, models=models,
                               rpm_limit=args.rpm_limit, tpm_limit=args.tpm_limit,
                               priority=args.priority, max_budget=args.max_budget,
                               budget_period=args.budget_period)
        bump_version(session)
    print(secret)
    print(f"key {args.name!r} ({args.role}) created; the secret is shown only once",
          file=sys.stderr)
    return 0

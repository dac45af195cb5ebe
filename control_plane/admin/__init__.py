"""Admin REST API under /admin/v1: one router per resource, mounted on the gateway's app.

Operators manage models, versions, aliases, backends, adapters and rollouts; admins also manage keys
and teams; users get 403. Every change is audited, bumps the registry snapshot version and
refreshes the snapshot source so the gateway routes on it at once."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from sqlalchemy.orm import Session, sessionmaker

from common.openapi_doc import install_openapi
from control_plane.admin import (adapters, aliases, audit, backend_status, backends, guardrails,
                                 keys, models, request_bodies, requests, slos, teams, usage,
                                 versions, whoami)
from control_plane.admin.common import ADMIN_PREFIX, AdminContext, install_admin_error_handlers

ROUTER_MODULES = (models, versions, aliases, adapters, backends, keys, teams, audit,
                  usage, requests, whoami, backend_status, guardrails, request_bodies)


def build_admin_router(session_factory: sessionmaker[Session], snapshot_source,
                       slo=None) -> APIRouter:
    ctx = AdminContext(session_factory, snapshot_source)
    root = APIRouter(prefix=ADMIN_PREFIX)
    for module in ROUTER_MODULES:
        root.include_router(module.build_router(ctx))
    root.include_router(slos.build_router(ctx, slo))
    return root


def include_admin_routers(app: FastAPI, session_factory: sessionmaker[Session],
                          snapshot_source, slo=None) -> None:
    """Every /admin/v1 resource, rollouts included (their API lives with the controller)."""
    from control_plane.rollouts import include_rollout_routes

    install_admin_error_handlers(app)
    install_openapi(app)
    app.include_router(build_admin_router(session_factory, snapshot_source, slo))
    include_rollout_routes(app, session_factory, snapshot_source, slo)


__all__ = ["ADMIN_PREFIX", "AdminContext", "build_admin_router", "include_admin_routers"]

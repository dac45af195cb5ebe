"""/admin/v1/backends: the engine endpoints that serve each model (and version)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field, HttpUrl
from sqlalchemy import select

from common.auth.principal import Principal
from common.vocabulary import BackendState, EngineKind, Tier
from control_plane.admin.common import (AdminContext, Body, Name, Page, PageDep, Patch, RowId,
                                        delete_row, image, operator, paginate, patch_row, with_etag)
from control_plane.backend_allowlist import allowlist_of
from registry.orm.catalog import Backend, Model
from registry.queries import add_backend, get_backend, get_model, get_version

VersionLabel = Field(None, min_length=1, max_length=100)


class BackendCreate(Body):
    model: Name
    version: str | None = VersionLabel
    url: HttpUrl = Field(description="OpenAI base URL, e.g. http://10.0.0.5:8000/v1",
                         max_length=500)
    engine: str = Field(EngineKind.OPENAI, min_length=1, max_length=50)
    served_model: str | None = Field(None, max_length=200)
    gpu_type: str | None = Field(None, max_length=50)
    weight: float = Field(1.0, gt=0, le=1000)
    tier: Tier = Tier.HOT
    state: BackendState = BackendState.STARTING
    managed: bool = False
    port: int | None = Field(None, ge=1, le=65535)
    # No `command`: a managed engine's command line is the control plane's own, built from
    # its configuration (an engine template, an executable in tiers.executables); the API
    # shows it but never sets it.


class BackendPatch(Patch):
    version: str | None = VersionLabel
    engine: str = Field(None, min_length=1, max_length=50)
    gpu_type: str | None = Field(None, max_length=50)
    weight: float = Field(None, gt=0, le=1000)
    tier: Tier = None
    state: BackendState = None
    port: int | None = Field(None, ge=1, le=65535)


def render(backend: Backend) -> dict[str, Any]:
    return image(backend, version=backend.version.label if backend.version else None,
                 adapters=sorted(a.name for a in backend.adapters))


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/backends", tags=["admin: backends"])

    @router.get("")
    def list_backends(model: str | None = Query(None, max_length=200), state: BackendState | None = Query(None),
                      page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            stmt = select(Backend).order_by(Backend.id)
            if model is not None:
                stmt = stmt.where(Backend.model_id == get_model(session, model).id)
            if state is not None:
                stmt = stmt.where(Backend.state == state)
            return paginate(session, stmt, page, render)

    @router.post("", status_code=201)
    def create(body: BackendCreate, request: Request, response: Response,
               who: Principal = Depends(operator)):
        allowlist_of(request.app).check(str(body.url))  # 400 before anything is written
        fields = body.model_dump(exclude={"model", "url", "version"})
        with ctx.change(who, "create", "backend") as change:
            backend = add_backend(change.session, body.model, str(body.url).rstrip("/"),
                                  version=body.version, **fields)
            change.resource_id, change.after = backend.id, render(backend)
        with_etag(response, backend)
        return change.after

    @router.get("/{backend_id}")
    def get(backend_id: RowId, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            backend = get_backend(session, backend_id)
            with_etag(response, backend)
            return render(backend)

    @router.patch("/{backend_id}")
    def update(backend_id: RowId, body: BackendPatch, request: Request, response: Response,
               who: Principal = Depends(operator)):
        def apply(session, backend, changes):
            if "version" in changes:
                label = changes.pop("version")
                model = session.get(Model, backend.model_id)
                backend.version_id = get_version(session, model, label).id if label else None
            for key, value in changes.items():
                setattr(backend, key, value)
            session.flush()
            session.refresh(backend, ["version"])

        return patch_row(ctx, who, "backend", backend_id, f"backend {backend_id}",
                         lambda s: get_backend(s, backend_id), body, request, response,
                         render=render, apply=apply)

    @router.delete("/{backend_id}", status_code=204)
    def delete(backend_id: RowId, request: Request, who: Principal = Depends(operator)):
        return delete_row(ctx, who, "backend", backend_id, f"backend {backend_id}",
                          lambda s: get_backend(s, backend_id), request, render=render)

    return router

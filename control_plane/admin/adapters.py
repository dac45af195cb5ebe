"""/admin/v1/models/{name}/adapters: LoRA adapters and the backends that have them loaded."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field
from sqlalchemy import select

from common.auth.principal import Principal
from control_plane.admin.common import (NAME_PATTERN, AdminContext, Body, Page, PageDep, PathName,
                                        RowId, delete_row, image, operator, paginate, with_etag)
from registry.orm.catalog import Adapter
from registry.queries import (add_adapter, attach_adapter, detach_adapter, get_adapter, get_backend,
                              get_model)


class AdapterCreate(Body):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    base_version: str | None = Field(None, min_length=1, max_length=100)
    source_uri: str | None = Field(None, max_length=2000)
    rank: int | None = Field(None, ge=1, le=1024)


def render(adapter: Adapter) -> dict[str, Any]:
    base = adapter.base_version.label if adapter.base_version else None
    return image(adapter, base_version=base)


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/models/{name}/adapters", tags=["admin: adapters"])

    @router.get("")
    def list_adapters(name: PathName, page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            model = get_model(session, name)
            stmt = select(Adapter).where(Adapter.model_id == model.id).order_by(Adapter.name)
            return paginate(session, stmt, page, render)

    @router.post("", status_code=201)
    def create(name: PathName, body: AdapterCreate, response: Response,
               who: Principal = Depends(operator)):
        with ctx.change(who, "create", "adapter") as change:
            model = get_model(change.session, name)
            adapter = add_adapter(change.session, model, body.name,
                                  **body.model_dump(exclude={"name"}))
            change.resource_id, change.after = f"{name}/{body.name}", render(adapter)
        with_etag(response, adapter)
        return change.after

    @router.get("/{adapter}")
    def get(name: PathName, adapter: PathName, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            row = get_adapter(session, get_model(session, name), adapter)
            with_etag(response, row)
            return render(row)

    @router.delete("/{adapter}", status_code=204)
    def delete(name: PathName, adapter: PathName, request: Request, who: Principal = Depends(operator)):
        return delete_row(ctx, who, "adapter", f"{name}/{adapter}", f"adapter '{adapter}'",
                          lambda s: get_adapter(s, get_model(s, name), adapter), request,
                          render=render)

    @router.put("/{adapter}/backends/{backend_id}")
    def attach(name: PathName, adapter: PathName, backend_id: RowId, who: Principal = Depends(operator)):
        """Record that the backend has the adapter loaded (LoRA-affinity routing uses it)."""
        with ctx.change(who, "attach_adapter", "adapter") as change:
            row = get_adapter(change.session, get_model(change.session, name), adapter)
            backend = get_backend(change.session, backend_id)
            attached = attach_adapter(change.session, backend, row)
            change.resource_id = f"{name}/{adapter}"
            change.after = {"backend_id": backend_id, "adapter": adapter, "attached": attached}
        return change.after

    @router.delete("/{adapter}/backends/{backend_id}")
    def detach(name: PathName, adapter: PathName, backend_id: RowId, who: Principal = Depends(operator)):
        with ctx.change(who, "detach_adapter", "adapter") as change:
            row = get_adapter(change.session, get_model(change.session, name), adapter)
            backend = get_backend(change.session, backend_id)
            detached = detach_adapter(change.session, backend, row)
            change.resource_id = f"{name}/{adapter}"
            change.before = {"backend_id": backend_id, "adapter": adapter, "attached": detached}
        return {"backend_id": backend_id, "adapter": adapter, "detached": detached}

    return router

"""/admin/v1/audit: who changed what, newest first, cursor-paginated (the log only grows,
so an id cursor stays stable while new entries arrive)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from gateway.auth import Principal
from registry.models import AuditLog

from .common import MAX_PAGE, AdminContext, image, operator


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/audit", tags=["admin: audit"])

    @router.get("")
    def list_audit(resource_type: str | None = Query(None), resource_id: str | None = Query(None),
                   action: str | None = Query(None), actor: str | None = Query(None),
                   limit: int = Query(100, ge=1, le=MAX_PAGE),
                   cursor: int | None = Query(None, ge=1, description="next_cursor of the last page"),
                   _: Principal = Depends(operator)):
        stmt = select(AuditLog).order_by(AuditLog.id.desc()).limit(limit + 1)
        for column, value in ((AuditLog.resource_type, resource_type),
                              (AuditLog.resource_id, resource_id),
                              (AuditLog.action, action)):
            if value is not None:
                stmt = stmt.where(column == value)
        if actor is not None:
            stmt = stmt.where(AuditLog.actor.contains(actor, autoescape=True))
        if cursor is not None:
            stmt = stmt.where(AuditLog.id < cursor)
        with ctx.read() as session:
            rows = session.scalars(stmt).all()
        page, more = rows[:limit], len(rows) > limit
        return {"object": "list", "data": [image(r) for r in page], "has_more": more,
                "next_cursor": page[-1].id if more else None}

    return router

"""/admin/v1/audit: who changed what, newest first, cursor-paginated (the log only grows,
so an id cursor stays stable while new entries arrive).

Operators read the audit log but not keys or teams: records of those (their before/after
images hold key names, teams, allowlists and limits) are withheld from them, and asking for
them by resource_type is a 403."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.vocabulary import Role
from control_plane.admin.common import MAX_INT, MAX_PAGE, AdminContext, cursor_page, operator
from registry.orm.audit import AuditLog

ADMIN_ONLY_RESOURCES = ("api_key", "team")  # the resources only admins may read
Filter = Annotated[str | None, Query(max_length=300)]


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/audit", tags=["admin: audit"])

    @router.get("")
    def list_audit(resource_type: Filter = None, resource_id: Filter = None,
                   action: Filter = None, actor: Filter = None,
                   limit: int = Query(100, ge=1, le=MAX_PAGE),
                   cursor: int | None = Query(None, ge=1, le=MAX_INT,
                                              description="next_cursor of the last page"),
                   who: Principal = Depends(operator)):
        stmt = select(AuditLog).order_by(AuditLog.id.desc()).limit(limit + 1)
        if not who.has_role(Role.ADMIN):
            if resource_type in ADMIN_ONLY_RESOURCES:
                raise OpenAIError(403, f"audit records of {resource_type} need the admin role",
                                  param="resource_type", code=ErrorCode.FORBIDDEN)
            stmt = stmt.where(AuditLog.resource_type.not_in(ADMIN_ONLY_RESOURCES))
        for column, value in ((AuditLog.resource_type, resource_type),
                              (AuditLog.resource_id, resource_id),
                              (AuditLog.action, action)):
            if value is not None:
                stmt = stmt.where(column == value)
        if actor is not None:
            stmt = stmt.where(AuditLog.actor.contains(actor, autoescape=True))
        return cursor_page(ctx, stmt, AuditLog.id, cursor, limit)

    return router

"""/admin/v1/requests: the most recent requests (metadata only: status, latency, TTFT, tokens,
cost, backend, key, trace id), newest first, filterable, cursor-paginated like the audit log.

    GET /admin/v1/requests?model=smollm2&status=error&limit=50
    GET /admin/v1/requests?cursor=<next_cursor>
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from sqlalchemy import select

from common.auth.principal import Principal
from control_plane.admin.common import MAX_PAGE, AdminContext, cursor_page, operator
from control_plane.admin.usage import utc
from registry.orm.request_log import RequestLog

Status = Literal["ok", "error", "aborted"]


class RequestEntry(BaseModel):
    id: int
    created_at: datetime
    request_id: str
    trace_id: str | None
    key_id: int | None
    team: str | None
    model: str
    version: str | None
    backend: str | None
    status: str
    http_status: int
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency_ms: float
    ttft_ms: float | None
    cache: str | None = None   # hit | miss: the response cache's answer; None: not asked


class RequestPage(BaseModel):
    object: str = "list"
    data: list[RequestEntry]
    has_more: bool
    next_cursor: int | None


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/requests", tags=["admin: requests"])

    @router.get("", response_model=RequestPage,
                responses={403: {"description": "needs the operator role"}})
    def list_requests(
        model: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        key_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
        team: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        status: Status | None = None,
        request_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        since: Annotated[datetime | None, Query(description="only requests from then on")]
        = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        cursor: Annotated[int | None, Query(ge=1, le=2**53 - 1,
                                            description="next_cursor of the last page")]
        = None,
        _: Principal = Depends(operator),
    ):
        stmt = select(RequestLog).order_by(RequestLog.id.desc()).limit(limit + 1)
        for column, value in ((RequestLog.model, model), (RequestLog.key_id, key_id),
                              (RequestLog.team, team), (RequestLog.status, status),
                              (RequestLog.request_id, request_id)):
            if value is not None:
                stmt = stmt.where(column == value)
        if since is not None:
            stmt = stmt.where(RequestLog.created_at >= utc(since))
        return cursor_page(ctx, stmt, RequestLog.id, cursor, limit)

    return router

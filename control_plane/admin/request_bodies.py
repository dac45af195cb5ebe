"""/admin/v1/requests/{request_id}/bodies: the stored bodies of one request (admins only: they
hold prompts and answers, redacted by the request's guardrail policy but still the users'
words). Rows exist for models or keys whose policy has `body_log` metadata or full.

    GET /admin/v1/requests/3f2a.../bodies   → {"object": "list", "data": [{mode, request_body,
                                               response_body, *_truncated, findings, ...}]}
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from sqlalchemy import select

from common.auth.principal import Principal
from control_plane.admin.common import AdminContext, admin, image
from registry.errors import NotFoundError
from registry.orm.guardrails import RequestBody

RequestId = Annotated[str, Path(min_length=1, max_length=64)]


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/requests", tags=["admin: requests"])

    @router.get("/{request_id}/bodies",
                responses={403: {"description": "needs the admin role"},
                           404: {"description": "no bodies stored for this request"}})
    def request_bodies(request_id: RequestId, _: Principal = Depends(admin)):
        with ctx.read() as session:
            rows = session.scalars(select(RequestBody).where(
                RequestBody.request_id == request_id).order_by(RequestBody.id)).all()
        if not rows:
            raise NotFoundError(f"no bodies are stored for request '{request_id}' (its "
                                "policy does not log bodies, or they were purged)",
                                param="request_id")
        return {"object": "list", "data": [image(r) for r in rows]}

    return router

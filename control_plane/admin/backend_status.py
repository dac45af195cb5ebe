"""/admin/v1/backend-status: what this gateway sees of each backend right now — its circuit
breaker, its in-flight requests and the engine's last reported queue, KV-cache use and prefix
hit rate. The registry's /backends says what a backend is; this says how it is doing.

    GET /admin/v1/backend-status -> {"object": "list", "data": [{"id": "3", "breaker": "closed",
                                     "inflight": 2, "running": 2, "waiting": 0, ...}]}
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.vocabulary import BreakerState
from control_plane.admin.common import AdminContext, operator


class BackendStatus(BaseModel):
    id: str
    model: str
    state: str
    breaker: str
    inflight: int
    running: float
    waiting: float
    kv_usage: float
    prefix_hit_rate: float


class BackendStatusList(BaseModel):
    object: str = "list"
    data: list[BackendStatus]


def backend_status(gateway) -> list[dict]:
    book = gateway.router.book
    breakers = gateway.breaker.states()  # a backend never tried has no breaker yet: closed
    out = []
    for model in gateway.snapshot.models.values():
        for b in model.backends:
            view = book.engine_view(b.id)
            out.append({"id": b.id, "model": model.name, "state": b.state,
                        "breaker": breakers.get(b.id, BreakerState.CLOSED),
                        "inflight": book.inflight.get(b.id, 0), "running": view.running,
                        "waiting": view.waiting, "kv_usage": view.kv_usage,
                        "prefix_hit_rate": view.prefix_hit_rate})
    return out


def build_router(_ctx: AdminContext | None = None) -> APIRouter:
    router = APIRouter(tags=["admin: backends"])

    @router.get("/backend-status", response_model=BackendStatusList,
                responses={403: {"description": "needs the operator role"},
                           503: {"description": "no gateway runs in this process"}})
    def status(request: Request, _: Principal = Depends(operator)):
        gateway = getattr(request.app.state, "gateway", None)
        if getattr(gateway, "router", None) is None:
            raise OpenAIError(503, "no gateway runs in this process, so no live backend status",
                              code=ErrorCode.NO_GATEWAY)
        return {"object": "list", "data": backend_status(gateway)}

    return router

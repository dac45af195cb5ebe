"""Tier routes under /admin/v1, for gateways running apart from the control plane.

POST /admin/v1/models/{name}/wake      start a cold model's engine (and load an adapter)
POST /admin/v1/models/{name}/activity  request counts seen by a gateway (idleness, promotion)
GET  /admin/v1/tiers                   what the tier manager is doing

A wake answers 200 once the engine is ready (within `wait_s`), 202 while it is still
starting (the start goes on; the gateway waits on its snapshot), or the error that stopped it
(a TierError, answered by the one InferplaneError handler).
"""
from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from common.auth.principal import Principal
from common.vocabulary import BackendState
from control_plane.admin.common import ADMIN_PREFIX, operator
from control_plane.tiers.manager import TierManager

MAX_WAKE_WAIT_S = 60.0  # one HTTP call holds no longer; the caller polls its snapshot after
QUICK_ERROR_S = 0.2


class WakeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    adapter: str | None = Field(None, min_length=1, max_length=200)
    wait_s: float = Field(0.0, ge=0.0, le=MAX_WAKE_WAIT_S)


class ActivityBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: int = Field(ge=0, le=1_000_000)


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()  # logged by the manager; retrieved so asyncio does not warn


def build_tiers_router(tiers: TierManager) -> APIRouter:
    router = APIRouter(prefix=ADMIN_PREFIX, tags=["admin: tiers"])

    @router.post("/models/{name}/wake", responses={
        202: {"description": "the engine is still starting"}, 409: {}, 429: {}, 502: {}})
    async def wake(name: Annotated[str, Path(min_length=1, max_length=200)], body: WakeBody | None = None, _: Principal = Depends(operator)):
        body = body or WakeBody()
        # The start outlives this call: a client that stops waiting must not cancel it.
        # A caller waiting wait_s waits no longer for a LoRA slot: every slot too young is
        # answered (adapter_slots_busy, Retry-After), not left to a 202 that cannot end well.
        task = asyncio.ensure_future(tiers.wake(name, body.adapter, wait_s=body.wait_s or None))
        task.add_done_callback(_retrieve)
        # A short floor so errors found at once (unknown model, no engine budget) answer here.
        done, _pending = await asyncio.wait({task}, timeout=max(body.wait_s, QUICK_ERROR_S))
        if not done:
            return JSONResponse({"model": name, "state": BackendState.STARTING}, status_code=202)
        url = task.result()  # a TierError is a domain error: the edge handler answers it
        return {"model": name, "state": BackendState.READY, "url": url, "adapter": body.adapter}

    @router.post("/models/{name}/activity", status_code=204)
    async def activity(name: Annotated[str, Path(min_length=1, max_length=200)], body: ActivityBody, _: Principal = Depends(operator)):
        tiers.note_request(name, body.requests)

    @router.get("/tiers")
    async def status(_: Principal = Depends(operator)):
        return {"object": "list", "data": tiers.status()}

    return router


__all__ = ["build_tiers_router"]

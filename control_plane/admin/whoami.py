"""/admin/v1/whoami: the signed-in principal (any role), so the console can show only what the
role may do. The API still checks every call; this only spares users buttons that would 403.

    GET /admin/v1/whoami -> {"name": "ops", "role": "operator", "team": null, "models": null, ...}
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from common.auth.authenticate import authenticate
from common.auth.principal import Principal


class Whoami(BaseModel):
    object: str = "principal"
    key_id: str
    name: str
    role: str
    team: str | None
    models: list[str] | None
    priority: str


def build_router(_ctx=None) -> APIRouter:
    router = APIRouter(tags=["admin: session"])

    @router.get("/whoami", response_model=Whoami,
                responses={401: {"description": "missing or invalid key"}})
    async def whoami(principal: Principal = Depends(authenticate)):
        return {"key_id": principal.key_id, "name": principal.name, "role": principal.role,
                "team": principal.team, "priority": principal.priority,
                "models": None if principal.models is None else list(principal.models)}

    return router

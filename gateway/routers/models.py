"""GET /v1/models: the models and aliases this key may use."""
from fastapi import APIRouter, Depends, Request
from gateway.responses import OrjsonResponse

from gateway.auth import Principal, authenticate

router = APIRouter(prefix="/v1", tags=["openai"])


def _entry(name: str, owner: str, parent: str | None = None) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": owner, "parent": parent}


@router.get("/models")
async def list_models(request: Request,
                      principal: Principal = Depends(authenticate)) -> OrjsonResponse:
    snapshot = request.app.state.gateway.snapshot
    data = []
    for name, model in snapshot.models.items():
        if principal.may_use(name):
            data.append(_entry(name, "inferplane"))
            data.extend(_entry(f"{name}:{a}", "inferplane", name)
                        for a in getattr(model, "adapters", ()) or ())
    for alias, target in snapshot.aliases.items():
        if principal.may_use(alias) or principal.may_use(target):
            data.append(_entry(alias, "inferplane", target))
    return OrjsonResponse({"object": "list", "data": data})

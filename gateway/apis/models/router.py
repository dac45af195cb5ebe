"""GET /v1/models: the models, aliases ("<model>:<alias>") and LoRA adapters
("<model>:<adapter>") this key may use.

Like OpenAI, a model the key may not use is hidden: it is absent from this list and a request
naming it gets the same 404 `model_not_found` as a model that does not exist, so a key cannot
probe which models are served.
"""
from fastapi import APIRouter, Depends, Request

from common.auth.authenticate import authenticate
from common.auth.principal import Principal
from gateway.request_path.json_response import OrjsonResponse

router = APIRouter(prefix="/v1", tags=["openai"])


def _entry(name: str, root: str, parent: str | None = None, kind: str = "model",
           task: str = "chat") -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "inferplane",
            "root": root, "parent": parent, "inferplane_kind": kind, "inferplane_task": task}


def visible_models(snapshot, principal: Principal) -> list[dict]:
    data = []
    for name, model in sorted(snapshot.models.items()):
        if not principal.may_use(name):
            continue
        data.append(_entry(name, name, task=model.task))
        data.extend(_entry(f"{name}:{a}", name, name, "adapter", model.task)
                     for a in sorted(getattr(model, "adapters", ()) or ()))
    for alias, target in sorted(snapshot.aliases.items()):
        if principal.may_use(alias) or principal.may_use(target):
            view = snapshot.models.get(target)
            data.append(_entry(alias, target, target, "alias", view.task if view else "chat"))
    return data


@router.get("/models")
async def list_models(request: Request,
                      principal: Principal = Depends(authenticate)) -> OrjsonResponse:
    snapshot = request.app.state.gateway.snapshot
    return OrjsonResponse({"object": "list", "data": visible_models(snapshot, principal)})

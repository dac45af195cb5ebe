"""GET /healthz (the process is alive) and /readyz (some model has a ready backend)."""
from fastapi import APIRouter, Request

from gateway.request_path.json_response import OrjsonResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> OrjsonResponse:
    return OrjsonResponse({"status": "ok"})


@router.get("/readyz", responses={503: {"description": "no model has a ready backend",
                                         "content": {"application/json": {}}}})
async def readyz(request: Request) -> OrjsonResponse:
    snapshot = request.app.state.gateway.snapshot
    ready = sorted(name for name, m in snapshot.models.items()
                   if any(b.state == "ready" for b in m.backends))
    if not ready:
        return OrjsonResponse({"status": "not_ready", "ready_models": [],
                               "snapshot_version": snapshot.version}, status_code=503)
    return OrjsonResponse({"status": "ready", "ready_models": ready,
                           "snapshot_version": snapshot.version})

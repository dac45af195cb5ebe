"""POST /v1/completions."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.auth import AuthPrincipal
from gateway.endpoints.completions import COMPLETIONS
from gateway.pipeline import handle
from gateway.schemas import openapi_body

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/completions", openapi_extra=openapi_body(COMPLETIONS.schema),
             response_class=Response)
async def completions(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, COMPLETIONS)

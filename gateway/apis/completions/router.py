"""POST /v1/completions."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from common.auth.authenticate import AuthPrincipal
from common.openapi_doc import openapi_body
from gateway.apis.completions.endpoint import COMPLETIONS
from gateway.request_path.pipeline import handle

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/completions", openapi_extra=openapi_body(COMPLETIONS.schema),
             response_class=Response)
async def completions(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, COMPLETIONS)

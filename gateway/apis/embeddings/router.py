"""POST /v1/embeddings."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from common.auth.authenticate import AuthPrincipal
from common.openapi_doc import openapi_body
from gateway.apis.embeddings.endpoint import EMBEDDINGS
from gateway.request_path.pipeline import handle

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/embeddings", openapi_extra=openapi_body(EMBEDDINGS.schema),
             response_class=Response)
async def embeddings(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, EMBEDDINGS)

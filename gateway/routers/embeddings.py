"""POST /v1/embeddings."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.auth import AuthPrincipal
from gateway.endpoints.embeddings import EMBEDDINGS
from gateway.pipeline import handle
from gateway.schemas import openapi_body

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/embeddings", openapi_extra=openapi_body(EMBEDDINGS.schema),
             response_class=Response)
async def embeddings(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, EMBEDDINGS)

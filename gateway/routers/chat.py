"""POST /v1/chat/completions."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.auth import AuthPrincipal
from gateway.endpoints.chat_completions import CHAT_COMPLETIONS
from gateway.pipeline import handle
from gateway.schemas import openapi_body

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/chat/completions", openapi_extra=openapi_body(CHAT_COMPLETIONS.schema),
             response_class=Response)
async def chat_completions(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, CHAT_COMPLETIONS)

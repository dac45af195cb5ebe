"""POST /v1/chat/completions."""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from common.auth.authenticate import AuthPrincipal
from common.openapi_doc import openapi_body
from gateway.apis.chat.endpoint import CHAT_COMPLETIONS
from gateway.request_path.pipeline import handle

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/chat/completions", openapi_extra=openapi_body(CHAT_COMPLETIONS.schema),
             response_class=Response)
async def chat_completions(request: Request, principal: AuthPrincipal) -> Response:
    return await handle(request, principal, CHAT_COMPLETIONS)

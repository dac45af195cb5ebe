"""POST /v1/chat/completions."""
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from gateway.auth import Principal, authenticate
from gateway.proxy import proxy_request
from gateway.schemas import ChatCompletionRequest, openapi_body

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/chat/completions", openapi_extra=openapi_body(ChatCompletionRequest),
             response_class=Response)
async def chat_completions(request: Request,
                           principal: Principal = Depends(authenticate)) -> Response:
    return await proxy_request(request, principal, "chat")

"""POST /v1/completions."""
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from gateway.auth import Principal, authenticate
from gateway.proxy import proxy_request
from gateway.schemas import CompletionRequest, openapi_body

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post("/completions", openapi_extra=openapi_body(CompletionRequest),
             response_class=Response)
async def completions(request: Request, principal: Principal = Depends(authenticate)) -> Response:
    return await proxy_request(request, principal, "completions")

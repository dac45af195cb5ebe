"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API).

Anthropic clients send their key as `x-api-key` (the SDK's default) or as a Bearer token; the
`anthropic-version` header is accepted whatever its value (one translation serves them all).
Every error, authentication included, is rendered in Anthropic's shape, so authentication
runs inside the route rather than as a dependency (whose errors take the OpenAI shape).
"""
from fastapi import APIRouter, Request
from fastapi.responses import Response

from common.auth.authenticate import authenticate, principal_from_key
from common.errors import InferplaneError
from common.openapi_doc import openapi_body
from gateway.apis.anthropic.endpoint import ANTHROPIC_COUNT_TOKENS, ANTHROPIC_MESSAGES
from gateway.request_path.json_response import OrjsonResponse
from gateway.request_path.pipeline import count_tokens, handle

router = APIRouter(prefix="/v1", tags=["anthropic"])
USER_ROLE = {"x-required-role": "user"}   # any valid key, checked inside the route
# authenticated inside the route (not a dependency the published document would see)
AUTH_ERRORS = {401: {"description": "Missing, unknown, revoked or expired API key"},
               403: {"description": "The credential's role does not allow this operation"},
               422: {"description": "Well-formed, but a content block, tool or format that is "
                                    "not served (e.g. a server tool)"}}


async def anthropic_principal(request: Request):
    """The caller, from `x-api-key` when no Authorization header is sent, else as usual."""
    key = request.headers.get("x-api-key")
    if key and "authorization" not in request.headers:
        principal = principal_from_key(request.app.state.gateway.snapshot_source.current,
                                       key.strip())
        request.state.principal = principal
        return principal
    return await authenticate(request)


@router.post("/messages", openapi_extra=openapi_body(ANTHROPIC_MESSAGES.schema) | USER_ROLE,
             response_class=Response, responses=AUTH_ERRORS)
async def create_message(request: Request) -> Response:
    try:
        principal = await anthropic_principal(request)
    except InferplaneError as exc:
        return ANTHROPIC_MESSAGES.error_response(exc)
    return await handle(request, principal, ANTHROPIC_MESSAGES)


@router.post("/messages/count_tokens",
             openapi_extra=openapi_body(ANTHROPIC_COUNT_TOKENS.schema) | USER_ROLE,
             response_class=Response, responses=AUTH_ERRORS)
async def count_message_tokens(request: Request) -> Response:
    """{"input_tokens": n}: the engine's count of the rendered prompt (its /tokenize), or the
    gateway's estimate where the engine cannot tokenize."""
    try:
        principal = await anthropic_principal(request)
        tokens = await count_tokens(request, principal, ANTHROPIC_COUNT_TOKENS)
    except InferplaneError as exc:
        return ANTHROPIC_COUNT_TOKENS.error_response(exc)
    return OrjsonResponse({"input_tokens": tokens})

"""POST /v1/responses, GET and DELETE /v1/responses/{response_id} (OpenAI Responses API)."""
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from common.auth.authenticate import AuthPrincipal
from common.connections import request_body
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.openapi_doc import openapi_body
from gateway.apis.responses.endpoint import RESPONSES, ResponsesTurn
from gateway.apis.responses.store import ResponseStore, response_store
from gateway.request_path.pipeline import handle

router = APIRouter(prefix="/v1", tags=["openai"])


def stored_responses(request: Request) -> ResponseStore:
    """The app's response store, made on first use (Redis when the gateway has Redis)."""
    app_state = request.app.state
    store = getattr(app_state, "response_store", None)
    if store is None:
        store = app_state.response_store = response_store(app_state.gateway.settings.redis_url)
    return store


Store = Annotated[ResponseStore, Depends(stored_responses)]


def _not_found(response_id: str) -> OpenAIError:
    return OpenAIError(404, f"No response found with id '{response_id}'.",
                       type="invalid_request_error", param="response_id", code=ErrorCode.NOT_FOUND)


# items, tools and formats are free-form objects in the schema: one that is not served is a 422
REFUSED = {422: {"description": "Well-formed, but an input item, tool or format that is not "
                                "served (e.g. a built-in tool)"}}


@router.post("/responses", openapi_extra=openapi_body(RESPONSES.schema), response_class=Response,
             responses=REFUSED)
async def create_response(request: Request, principal: AuthPrincipal, store: Store) -> Response:
    raw = await request_body(request)
    if len(raw) > request.app.state.gateway.settings.max_body_bytes:
        raise OpenAIError(413, "request body too large", code=ErrorCode.BODY_TOO_LARGE)
    turn = await ResponsesTurn.prepare(raw, principal, store)
    return await turn.stored(await handle(request, principal, turn), store)


@router.get("/responses/{response_id}")
async def retrieve_response(response_id: str, principal: AuthPrincipal, store: Store) -> dict:
    record = await store.get(response_id, principal.key_id)
    if record is None:
        raise _not_found(response_id)
    return record.response


@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, principal: AuthPrincipal, store: Store) -> dict:
    if not await store.delete(response_id, principal.key_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}

"""POST /v1/responses: OpenAI's Responses API, served by engines' chat completions.

A Responses request may continue a stored conversation (`previous_response_id`), which is
read asynchronously before the pipeline runs, so each request gets its own endpoint object,
a `ResponsesTurn`, holding that history, the response's id and (once answered) the record to
store:

    turn = await ResponsesTurn.prepare(raw, principal, store)   # 400/404 in OpenAI's shape
    response = await handle(request, principal, turn)
    return await turn.stored(response, store)     # store=true: kept before the client has it

The store write happens before the answer reaches the client (non-streamed: before the
response is returned; streamed: before the bytes with `response.completed` are sent), so a
client continuing at once with `previous_response_id` always finds it.
"""
from __future__ import annotations

from fastapi.responses import Response
from starlette.responses import StreamingResponse

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.apis.chat.endpoint import CHAT
from gateway.apis.endpoint import Endpoint, ParsedRequest
from gateway.apis.events import EventStream
from gateway.apis.responses import translate as rt
from gateway.apis.responses.store import ResponseStore, StoredResponse
from gateway.apis.responses.stream import ResponsesStream


class Responses(Endpoint):
    """What every Responses request shares (schema, engine protocol, error shape)."""
    name = "responses"
    path = "/v1/responses"
    schema = rt.ResponsesRequest
    protocol = CHAT


class ResponsesTurn(Responses):
    """One Responses request: its history, identity and, once answered, its record."""

    def __init__(self, req: rt.ResponsesRequest, history: list[dict], owner: str):
        self.req = req
        self.owner = owner
        self.info = rt.ResponseInfo.of(req)
        self.turn = rt.to_chat(req, history)
        self.pending: StoredResponse | None = None

    @classmethod
    async def prepare(cls, raw: bytes, principal, store: ResponseStore) -> "ResponsesTurn":
        _, req = rt.parse_responses_request(raw)
        history: list[dict] = []
        if req.previous_response_id:
            previous = await store.get(req.previous_response_id, principal.key_id)
            if previous is None:
                raise OpenAIError(404, f"Previous response with id '{req.previous_response_id}'"
                                  " not found.", type="invalid_request_error",
                                  param="previous_response_id",
                                  code=ErrorCode.PREVIOUS_RESPONSE_NOT_FOUND)
            history = previous.conversation
        return cls(req, history, principal.key_id)

    def parse(self, raw: bytes) -> ParsedRequest:
        req = self.req      # validated by `prepare`: not twice
        return ParsedRequest(model=req.model, body=self.turn.body, stream=req.stream,
                             include_usage=False, max_tokens=req.max_output_tokens,
                             max_tokens_param="max_output_tokens", user=req.user)

    def from_engine(self, result: dict, parsed: ParsedRequest) -> dict:
        response = rt.from_chat(result, self.info)
        self.answered(response)
        return response

    def stream_events(self, parsed: ParsedRequest) -> EventStream:
        return EventStream(ResponsesStream(self.info),
                           on_close=lambda stream: self.answered(stream.response))

    def answered(self, response: dict) -> None:
        if self.req.store:
            self.pending = StoredResponse(
                response, [*self.turn.conversation, *rt.output_messages(response)], self.owner)

    async def stored(self, response: Response, store: ResponseStore) -> Response:
        """`response`, with this turn's record written to `store` before the client has it."""
        if isinstance(response, StreamingResponse):
            response.body_iterator = self._store_before(response.body_iterator, store)
        elif self.pending is not None:
            await store.put(self.pending)
            self.pending = None
        return response

    async def _store_before(self, chunks, store: ResponseStore):
        async for chunk in chunks:
            if self.pending is not None:   # set by `closing`, which made this chunk
                record, self.pending = self.pending, None
                await store.put(record)
            yield chunk


RESPONSES = Responses()

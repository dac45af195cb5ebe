"""A hit answered from a stored answer, through the same relay a fresh answer takes.

    return await replay(scope, answer, headers={"x-inferplane-cache": "hit"})

A stored JSON body goes through `finish_json` (usage, the endpoint's client shape, the model
renamed to what the client asked); a stored stream is fed to `relay_stream` as if an engine
sent it, so a hit streams valid SSE for every endpoint (chat chunks, or the Responses and
Anthropic events), with the usage chunk only when the client asked for it. The scope is
closed (accounted as a hit, limits settled) when the answer is done, as for any request.
"""
from __future__ import annotations

import orjson
from fastapi.responses import Response

from engine_adapter.base import EngineStream
from gateway.cache.entry import CachedAnswer
from gateway.request_path.relay import finish_json, relay_stream
from gateway.request_path.sse_response import SSEResponse

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class ReplayStream(EngineStream):
    """A stored stream's events, all ready at once (one client write)."""

    def __init__(self, events: list[bytes]):
        self._events = events

    async def __aiter__(self):
        events = self._events
        if events:
            self._events = events[1:]   # the rest: taken by ready_events
            yield events[0]

    def ready_events(self) -> list[bytes]:
        events, self._events = self._events, []
        return events

    async def aclose(self) -> None:
        self._events = []


def _rename(answer: CachedAnswer, requested: str) -> tuple[bytes, bytes] | None:
    served = answer.served_model
    return None if served == requested else (
        f'"model":"{served}"'.encode(), f'"model":"{requested}"'.encode())


async def replay(scope, answer: CachedAnswer, headers: dict[str, str]) -> Response:
    parsed, endpoint = scope.parsed, scope.endpoint
    guard = getattr(scope, "guard", None)   # output guardrails apply to a stored answer too
    if not answer.streamed:
        result = orjson.loads(answer.payload)
        if guard is not None:
            result = guard.check_answer(result)
        content = finish_json(result, scope, endpoint.protocol.result_text)
        await scope.close(200)
        return Response(content, media_type="application/json", headers=headers)
    scope.stats.first_token()
    stream = ReplayStream(answer.events())
    body = relay_stream(stream if guard is None else guard.wrap(stream), scope,
                        parsed.include_usage, _rename(answer, parsed.model), None,
                        endpoint.stream_events(parsed))
    return SSEResponse(body, headers={**SSE_HEADERS, **headers}, scope=scope)

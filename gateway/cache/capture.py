"""A miss's answer on its way to the client, kept for the cache once it is complete.

    call.protocol = CapturingProtocol(call.protocol, served_names, keep, max_bytes)

The wrapper stands in for the endpoint's engine protocol for one request: everything is
delegated, and the first engine answer that succeeds is handed to `keep(CachedAnswer)`: a
JSON body at once (serialised before the relay fills in usage and renames the model), a
stream once its `data: [DONE]` passed through with no error event. Only that first answer is
considered: a stream continued on another backend after a break (gateway/request_path/
resume.py) or an answer from a fallback model (a served name the model's backends do not
have) is never stored as this model's answer; nor is one past `max_bytes`.
"""
from __future__ import annotations

from collections.abc import Callable

import orjson

from engine_adapter.base import EngineStream
from gateway.cache.entry import CachedAnswer
from gateway.request_path.relay import is_done

Keep = Callable[[CachedAnswer], None]


class CapturingProtocol:
    __slots__ = ("_inner", "_keep", "_max_bytes", "_served", "_used")

    def __init__(self, inner, served_names: frozenset[str], keep: Keep, max_bytes: int):
        self._inner = inner
        self._served = served_names
        self._keep = keep
        self._max_bytes = max_bytes
        self._used = False

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def call(self, adapter, body: dict):
        result = await self._inner.call(adapter, body)
        if self._used:
            return result
        self._used = True
        served = body.get("model")
        if served not in self._served:
            return result
        if isinstance(result, dict):
            raw = orjson.dumps(result)
            if len(raw) <= self._max_bytes:
                self._keep(CachedAnswer.json(raw, served))
            return result
        return CapturingStream(result, served, self._keep, self._max_bytes)


class CapturingStream(EngineStream):
    """The engine's stream, unchanged; its events recorded until [DONE] (then kept)."""

    def __init__(self, inner: EngineStream, served: str, keep: Keep, max_bytes: int):
        self._inner = inner
        self._served = served
        self._keep = keep
        self._room = max_bytes
        self._events: list[bytes] | None = []   # None: not storable any more
        ready = getattr(inner, "ready_events", None)
        if ready is not None:
            self.ready_events = lambda: self._seen(ready())

    async def __aiter__(self):
        async for event in self._inner:
            self._note(event)
            yield event

    def _seen(self, events: list[bytes]) -> list[bytes]:
        for event in events:
            self._note(event)
        return events

    def _note(self, event: bytes) -> None:
        events = self._events
        if events is None:
            return
        self._room -= len(event)
        if self._room < 0 or event.startswith((b'data: {"error"', b'data:{"error"')):
            self._events = None
            return
        events.append(event)
        if is_done(event):
            self._events = None
            self._keep(CachedAnswer.sse(events, self._served))

    async def aclose(self) -> None:
        self._events = None
        await self._inner.aclose()

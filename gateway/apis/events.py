"""Typed server-sent events for APIs whose streams name each event (Responses, Anthropic).

    sse_event("message_start", {"type": "message_start", ...})
    -> b'event: message_start\\ndata: {...}\\n\\n'
    EventStream(translator, on_close)   # the pipeline's StreamEvents over a translator
"""
from __future__ import annotations

import secrets

import orjson


def sse_event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def new_id(prefix: str) -> str:
    """An opaque id in the API's style: resp_…, msg_…, fc_…, toolu_…"""
    return f"{prefix}_{secrets.token_hex(12)}"


def encode(events: list[dict]) -> bytes:
    """Events (each with its "type") as SSE bytes, one `event:` line each."""
    return b"".join(sse_event(e["type"], e) for e in events)


class EventStream:
    """`StreamEvents` (gateway/apis/endpoint.py) over a stream translator: an object with
    open() / feed(chunk) / close() / fail(message, code) returning event dicts and a
    `chat_usage` attribute. `on_close(translator)` runs when a stream ended complete."""

    def __init__(self, translator, on_close=None):
        self.translator = translator
        self.on_close = on_close

    def opening(self) -> bytes:
        return encode(self.translator.open())

    def chunk(self, data: dict) -> bytes:
        return encode(self.translator.feed(data))

    def closing(self, usage: dict | None) -> bytes:
        if usage:
            self.translator.chat_usage = usage
        events = self.translator.close()
        if self.on_close is not None:
            self.on_close(self.translator)
        return encode(events)

    def error(self, message: str, code: str | None) -> bytes:
        return encode(self.translator.fail(message, code))

"""Typed server-sent events for APIs whose streams name each event (Responses, Anthropic).

    sse_event("message_start", {"type": "message_start", ...})
    -> b'event: message_start\\ndata: {...}\\n\\n'
"""
from __future__ import annotations

import secrets

import orjson


def sse_event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def new_id(prefix: str) -> str:
    """An opaque id in the API's style: resp_…, msg_…, fc_…, toolu_…"""
    return f"{prefix}_{secrets.token_hex(12)}"

"""Relay an engine's answer to the client.

Streams are forwarded without re-serialising, events that arrived together in one write; only
events carrying usage are parsed (to account tokens, and to drop the usage chunk when the client
did not ask for it; the gateway always asks the engine for it). A stream that breaks mid-way
ends with an OpenAI error event and `data: [DONE]`, so clients never hang on a half-finished
stream.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator

import orjson

from engine_adapter.base import EngineError, EngineStream
from gateway.accounting import CLIENT_CLOSED, Accounting, estimate_tokens

DONE = b"data: [DONE]\n\n"


def error_event(message: str, type_: str = "upstream_error", code: str | None = None) -> bytes:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def is_done(event: bytes) -> bool:
    return event.startswith(b"data: [DONE]") or event.startswith(b"data:[DONE]")


def _has_usage(event: bytes) -> bool:
    return b'"usage"' in event and b'"usage":null' not in event and b'"usage": null' not in event


def payload(event: bytes) -> dict | None:
    start = event.find(b"data:")
    if start < 0:
        return None
    try:
        data = orjson.loads(event[start + 5:])
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _usage_event(event: bytes, acct: Accounting, client_wants_usage: bool) -> bytes | None:
    """Account the usage in `event`; what to forward (None drops a usage-only chunk)."""
    data = payload(event)
    if data is None:
        return event
    acct.usage(data.get("usage"))
    if client_wants_usage:
        return event
    if not data.get("choices"):
        return None
    data.pop("usage", None)
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _relay_event(event: bytes, acct: Accounting, client_wants_usage: bool,
                 rename: tuple[bytes, bytes] | None) -> bytes | None:
    """What to forward for one upstream event: DONE (itself) at the end, None to drop it."""
    if is_done(event):
        return DONE
    if event.startswith(b"data: {\"error\"") or event.startswith(b"data:{\"error\""):
        acct.status = 502
    elif _has_usage(event):
        event = _usage_event(event, acct, client_wants_usage)
        if event is None:
            return None
    else:
        acct.chunk()
        if acct.text_parts is not None:
            acct.text_parts.append(delta_text(payload(event)))
    if rename is not None:
        event = event.replace(rename[0], rename[1], 1)
    return event


async def relay_stream(stream: EngineStream, acct: Accounting, client_wants_usage: bool,
                       rename: tuple[bytes, bytes] | None) -> AsyncIterator[bytes]:
    # Events that arrived together leave in one write: each client send crosses the whole
    # ASGI middleware stack, and a stream's events often come in a single upstream read.
    ready = getattr(stream, "ready_events", None)
    saw_done = False
    try:
        async for event in stream:
            out = _relay_event(event, acct, client_wants_usage, rename)
            if out is DONE:
                saw_done = True
                break
            batch = [] if out is None else [out]
            for more in ready() if ready is not None else ():
                out = _relay_event(more, acct, client_wants_usage, rename)
                if out is DONE:
                    saw_done = True
                    break
                if out is not None:
                    batch.append(out)
            if saw_done:
                acct.upstream_ok()
                batch.append(DONE)
                yield b"".join(batch)
                return
            if batch:
                yield batch[0] if len(batch) == 1 else b"".join(batch)
        if not saw_done:
            raise EngineError("protocol", "upstream stream ended before [DONE]")
        acct.upstream_ok()
        yield DONE
    except EngineError as exc:
        acct.status = 504 if exc.kind == "timeout" else 502
        acct.upstream_error(acct.backend, exc.kind)
        yield error_event(f"the model backend failed mid-stream: {exc.message}",
                          code=exc.kind)
        yield DONE
    except (asyncio.CancelledError, GeneratorExit):
        acct.status = CLIENT_CLOSED
        raise
    finally:
        if saw_done:
            # The client's answer is complete: end it now and let the upstream connection
            # drain its last bytes back into the pool off the client's clock.
            _close_later(stream)
        else:
            await stream.aclose()
        acct.finish()


_closing: set[asyncio.Task] = set()   # strong references: the loop keeps only weak ones


def _close_later(stream: EngineStream) -> None:
    task = asyncio.get_running_loop().create_task(stream.aclose())
    _closing.add(task)
    task.add_done_callback(_closing.discard)


def finish_json(result: dict, acct: Accounting, requested: str, completion_text) -> bytes:
    """The non-streaming body: usage always present, model named as the client asked."""
    usage = result.get("usage")
    if not isinstance(usage, dict):
        prompt = acct.prompt_estimate
        completion = estimate_tokens(completion_text(result))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
        result["usage"] = usage
    acct.usage(usage)
    result["model"] = requested
    return orjson.dumps(result)


def delta_text(chunk: dict | None) -> str:
    """The text one streamed chat or completion chunk adds."""
    if not chunk:
        return ""
    out = []
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta")
        out.append((delta.get("content") if isinstance(delta, dict) else choice.get("text")) or "")
    return "".join(out)


def chat_text(result: dict) -> str:
    return "".join((c.get("message") or {}).get("content") or "" for c in result.get("choices", []))


def completion_text(result: dict) -> str:
    return "".join(c.get("text") or "" for c in result.get("choices", []))

"""Relay an engine's answer to the client.

Streams are forwarded without re-serialising, events that arrived together in one write; only
events carrying usage are parsed (to account tokens, and to drop the usage chunk when the client
did not ask for it; the gateway always asks the engine for it). A stream that breaks mid-way
continues on another backend when the request allows it (see gateway/request_path/resume.py), else ends with
an OpenAI error event and `data: [DONE]`, so clients never hang on a half-finished stream.

An endpoint whose client format is not the engine's gives a `StreamEvents` translator: then
every engine event is parsed, accounted, and handed to it (opening events lead the first
write, its closing events replace `data: [DONE]`, its error events the error event).

The last write of a stream is a `Last` (bytes): the SSE response ends the body with it.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

import orjson

from common.error_codes import UpstreamErrorKind
from engine_adapter.base import EngineError, EngineStream
from gateway.request_path.accounting import CLIENT_CLOSED, estimate_tokens
from gateway.request_path.eager import start_eagerly

DONE = b"data: [DONE]\n\n"


class Last(bytes):
    """The final write of a stream (the client has its whole answer after it)."""


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


class _Relay:
    """Per-stream relay state: what to forward for each upstream event, and (when the stream
    may be resumed elsewhere) the text the client already has."""
    __slots__ = ("scope", "client_wants_usage", "rename", "sent", "sent_tokens", "carried",
                 "saw_done", "delta_text", "events", "usage")

    def __init__(self, scope, client_wants_usage: bool, rename: tuple[bytes, bytes] | None,
                 track_text: bool, events=None):
        self.scope = scope
        self.client_wants_usage = client_wants_usage
        self.rename = rename
        self.sent: list[str] | None = [] if track_text else None
        self.sent_tokens = 0     # content chunks delivered (one token each on most engines)
        self.carried = 0         # tokens delivered before the current upstream took over
        self.saw_done = False
        self.delta_text = scope.endpoint.protocol.delta_text
        self.events = events     # the endpoint's StreamEvents, None to forward engine bytes
        self.usage: dict | None = None

    def continue_on(self, stream_rename: tuple[bytes, bytes] | None) -> None:
        self.rename = stream_rename
        self.carried = self.sent_tokens

    def sent_text(self) -> str:
        return "".join(self.sent or ())

    def event(self, event: bytes) -> bytes | None:
        """What to forward for one upstream event: DONE (itself) at the end, None to drop it."""
        if self.events is not None:
            return self._translated(event)
        scope = self.scope
        if is_done(event):
            return DONE
        if event.startswith(b"data: {\"error\"") or event.startswith(b"data:{\"error\""):
            scope.status = 502
        elif _has_usage(event):
            event = self._usage_event(event)
            if event is None:
                return None
        else:
            if self.sent is not None or scope.stats.text_parts is not None:
                if self._text(payload(event), event) is None:
                    return None
            scope.stats.chunk()
        if self.rename is not None:
            event = event.replace(self.rename[0], self.rename[1], 1)
        return event

    def _text(self, data: dict | None, event: bytes) -> str | None:
        """Keep the chunk's text where it is tracked; None: drop the chunk."""
        text = self.delta_text(data)
        if self.carried and not text and b'"finish_reason":null' in event:
            return None  # the continuation's opening role chunk: the client had one
        if self.sent is not None and text:
            self.sent.append(text)
            self.sent_tokens += 1
        if self.scope.stats.text_parts is not None:
            self.scope.stats.text_parts.append(text)
        return text

    def _translated(self, event: bytes) -> bytes | None:
        """The client events for one engine event, through the endpoint's translator."""
        if is_done(event):
            return DONE
        data = payload(event)
        if data is None:
            return None
        if "error" in data:
            self.scope.status = 502
            return None
        usage = data.get("usage")
        if isinstance(usage, dict):
            self._account_usage(data, usage)
        elif self._text(data, event) is None:
            return None
        else:
            self.scope.stats.chunk()
        return self.events.chunk(data) or None

    def _account_usage(self, data: dict, usage: dict) -> dict:
        if self.carried:
            # A continuation's prompt holds the text sent before it: count that as completion.
            usage = dict(usage, prompt_tokens=max(0, (usage.get("prompt_tokens") or 0)
                                                  - self.carried),
                         completion_tokens=(usage.get("completion_tokens") or 0) + self.carried)
            data["usage"] = usage
        self.scope.stats.usage(usage)
        self.usage = usage
        return usage

    def _usage_event(self, event: bytes) -> bytes | None:
        """Account the usage in `event`; what to forward (None drops a usage-only chunk)."""
        data = payload(event)
        if data is None:
            return event
        usage = data.get("usage")
        if isinstance(usage, dict):
            carried = self.carried
            self._account_usage(data, usage)
            if carried:
                event = b"data: " + orjson.dumps(data) + b"\n\n"
        if self.client_wants_usage:
            return event
        if not data.get("choices"):
            return None
        data.pop("usage", None)
        return b"data: " + orjson.dumps(data) + b"\n\n"

    def done(self) -> bytes:
        return DONE if self.events is None else self.events.closing(self.usage)

    def error(self, message: str, code: str | None) -> bytes:
        if self.events is None:
            return error_event(message, code=code) + DONE
        return self.events.error(message, code)


async def _batches(stream: EngineStream, relay: _Relay) -> AsyncIterator[bytes]:
    # Events that arrived together leave in one write: each client send crosses the whole
    # ASGI middleware stack, and a stream's events often come in a single upstream read.
    ready = getattr(stream, "ready_events", None)
    async for event in stream:
        out = relay.event(event)
        batch = [] if out is None or out is DONE else [out]
        if out is not DONE:
            for more in ready() if ready is not None else ():
                out = relay.event(more)
                if out is DONE:
                    break
                if out is not None:
                    batch.append(out)
        if out is DONE:
            relay.saw_done = True
            relay.scope.upstream_ok()
            batch.append(relay.done())
            yield Last(b"".join(batch))
            return
        if batch:
            yield batch[0] if len(batch) == 1 else b"".join(batch)
    raise EngineError(UpstreamErrorKind.PROTOCOL, "upstream stream ended before [DONE]")


Resume = Callable[[str, int, EngineError],
                  Awaitable["tuple[EngineStream, tuple[bytes, bytes] | None] | None"]]


async def relay_stream(stream: EngineStream, scope, client_wants_usage: bool,
                       rename: tuple[bytes, bytes] | None, resume: Resume | None = None,
                       events=None) -> AsyncIterator[bytes]:
    """`resume(sent_text, sent_tokens, error)` may continue a broken stream on another
    backend; without it (or when it returns None) the stream ends with an error event.
    `events`: the endpoint's StreamEvents (None forwards the engine's events). The scope is
    closed (accounted, released) when the stream ends, however it ends."""
    relay = _Relay(scope, client_wants_usage, rename, track_text=resume is not None,
                   events=events)
    try:
        if events is not None:
            opening = events.opening()
            if opening:
                yield opening
        while not relay.saw_done:
            try:
                async for batch in _batches(stream, relay):
                    yield batch
            except EngineError as exc:
                scope.upstream_error(scope.backend, exc.kind)
                resumed = None if resume is None else await resume(
                    relay.sent_text(), relay.sent_tokens, exc)
                if resumed is None:
                    scope.status = 504 if exc.kind == "timeout" else 502
                    yield Last(relay.error(f"the model backend failed mid-stream: "
                                           f"{exc.message}", exc.kind))
                    return
                await stream.aclose()
                stream, stream_rename = resumed
                scope.engine_stream = stream
                relay.continue_on(stream_rename)
    except (asyncio.CancelledError, GeneratorExit):
        scope.status = CLIENT_CLOSED
        raise
    finally:
        if relay.saw_done:
            # The client's answer is complete: end it now and let the upstream connection
            # drain its last bytes back into the pool off the client's clock.
            scope.engine_stream = None
            _close_later(stream)
        await scope.close()   # aborts the engine stream it still holds


_closing: set[asyncio.Task] = set()   # strong references: the loop keeps only weak ones


def _close_later(stream: EngineStream) -> None:
    """Close now if that needs no wait (the stream was read to its end), else in a task."""
    start_eagerly(stream.aclose(), _closing)


def finish_json(result: dict, scope, result_text) -> bytes:
    """The non-streaming body: usage always present, in the endpoint's client shape."""
    usage = result.get("usage")
    if not isinstance(usage, dict) or scope.stats.text_parts is not None:
        text = result_text(result)
        if scope.stats.text_parts is not None:
            scope.stats.text_parts.append(text)
        if not isinstance(usage, dict):
            prompt = scope.prompt_estimate
            completion = estimate_tokens(text)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
            result["usage"] = usage
    scope.stats.usage(usage)
    return orjson.dumps(scope.endpoint.from_engine(result, scope.parsed))

"""Per-request identity: a request id and a SERVER span around every HTTP request.

`RequestContextMiddleware` (pure ASGI, so the span stays current while a streamed body is
sent) continues the caller's W3C `traceparent`, takes the caller's `x-request-id` when it is
sane or makes one, and answers both in the response headers (`x-request-id`, `traceparent`
naming the gateway's server span). `current_request_id()` gives the id to log lines.
"""
from __future__ import annotations

import contextlib
import random
import re
from contextvars import ContextVar

from opentelemetry import trace

from common import tracing
from common.tracing import extract_context, get_tracer, traceparent_of

_REQUEST_ID: ContextVar[str | None] = ContextVar("inferplane_request_id", default=None)
_SANE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
UNTRACED_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


def current_request_id() -> str | None:
    return _REQUEST_ID.get()


@contextlib.contextmanager
def bound_request_id(request_id: str):
    """The request id of work that did not arrive over HTTP (a batch's line) while the block
    runs: its log lines and usage row carry it as a request's would."""
    token = _REQUEST_ID.set(request_id)
    try:
        yield request_id
    finally:
        _REQUEST_ID.reset(token)


_READ = frozenset({b"x-request-id", b"traceparent", b"tracestate"})


def _headers(scope) -> dict[str, str]:
    """The few request headers read here (ASGI servers give names in lower case)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _READ}


def _new_id() -> str:
    # 128 random bits as trace ids are made (random reseeds in a forked worker), without
    # os.urandom's system call a request
    return f"{random.getrandbits(128):032x}"


class RequestContextMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _SANE_ID.match(incoming) else _new_id()
        token = _REQUEST_ID.set(request_id)
        if not tracing.tracing_configured():   # tracing off: ids only, no span to make
            try:
                await self.app(scope, receive, self._send_with_id(send, request_id))
            finally:
                _REQUEST_ID.reset(token)
            return
        if not tracing.spans_exported():   # ids to continue and answer, nothing recorded
            span = tracing.unrecorded_server_span(headers)
            trace_token = tracing.bind_unrecorded_span(span)
            try:
                await self.app(scope, receive, self._send_with_ids(send, span, request_id))
            finally:
                tracing.reset_unrecorded_span(trace_token)
                _REQUEST_ID.reset(token)
            return
        name = f"{scope['method']} {scope['path']}"
        attributes = {"http.request.method": scope["method"], "url.path": scope["path"],
                      "inferplane.request_id": request_id}
        try:
            with get_tracer().start_as_current_span(
                    name, context=extract_context(headers), kind=trace.SpanKind.SERVER,
                    attributes=attributes) as span:
                await self.app(scope, receive, self._send_with_ids(send, span, request_id))
        finally:
            _REQUEST_ID.reset(token)

    @staticmethod
    def _send_with_id(send, request_id: str):
        header = (b"x-request-id", request_id.encode())

        async def wrapped(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)
        return wrapped

    @staticmethod
    def _send_with_ids(send, span, request_id: str):
        async def wrapped(message):
            if message["type"] == "http.response.start":
                status = message["status"]
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
                extra = [(b"x-request-id", request_id.encode())]
                parent = traceparent_of(span)
                if parent:
                    extra.append((b"traceparent", parent.encode()))
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)
        return wrapped

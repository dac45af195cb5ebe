"""Spans of one engine call: `gateway.upstream` with `gateway.first_token` (send → first event
or full answer) and, for streams, `gateway.stream` (first event → last byte relayed).

The upstream span is made current while the adapter sends, so the httpx hook writes its
traceparent into the engine request and the engine's spans hang under it. With no exporter
(common.tracing.spans_exported) nothing would record these spans: the upstream span is then
only a span id under the request's trace (the engine's traceparent still names it) and the
first-token and stream spans are not made.
"""
from __future__ import annotations

from contextlib import contextmanager

from opentelemetry import trace

from common.metric_names import NO_VERSION
from common.tracing import (bind_unrecorded_span, get_tracer, reset_unrecorded_span,
                            spans_exported, unrecorded_child_span)


class UpstreamTrace:
    def __init__(self, backend, attempt: int):
        self._recording = spans_exported()
        self._stream: trace.Span | None = None
        self._ended = False
        if not self._recording:
            self.span = unrecorded_child_span()
            return
        self.span = get_tracer().start_span("gateway.upstream", attributes={
            "inferplane.backend": backend.id, "inferplane.engine": backend.engine,
            "inferplane.version": backend.version or NO_VERSION, "inferplane.attempt": attempt})

    def sending(self):
        """Current while waiting for the first token: engine requests carry this trace."""
        return self._recorded_sending() if self._recording else _Current(self.span)

    @contextmanager
    def _recorded_sending(self):
        with trace.use_span(self.span, end_on_exit=False), \
                get_tracer().start_as_current_span("gateway.first_token"):
            yield

    def streaming(self) -> None:
        if not self._recording:
            return
        self.span.add_event("first_token")
        ctx = trace.set_span_in_context(self.span)
        self._stream = get_tracer().start_span("gateway.stream", context=ctx)

    def fail(self, kind: str, message: str) -> None:
        self.span.set_attribute("inferplane.error_kind", kind)
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, message))
        self.end()

    def end(self, status: int | None = None, chunks: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self._stream is not None:
            if chunks is not None:
                self._stream.set_attribute("inferplane.chunks", chunks)
            self._stream.end()
        if status is not None:
            self.span.set_attribute("http.response.status_code", status)
            if status >= 500:
                self.span.set_status(trace.Status(trace.StatusCode.ERROR))
        self.span.end()


class _Current:
    """`with _Current(span):` makes an unrecorded span current for the engine's traceparent
    (common.tracing.bind_unrecorded_span), without `use_span`'s generator, status handling
    and exception recording, nor OpenTelemetry's context: nothing records this span."""
    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span):
        self._span = span

    def __enter__(self) -> trace.Span:
        self._token = bind_unrecorded_span(self._span)
        return self._span

    def __exit__(self, *exc) -> None:
        reset_unrecorded_span(self._token)

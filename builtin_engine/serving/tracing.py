"""OpenTelemetry spans inside the engine, under the caller's W3C traceparent.

Two pieces, used by the HTTP server:

    app.add_middleware(EngineTraceMiddleware)          # SERVER span per request
    chunks = traced_outputs(generate_text(...))        # prefill / decode child spans

`EngineTraceMiddleware` continues the incoming `traceparent` (the gateway's upstream span) and
keeps the span current until the last byte of a streamed body. `traced_outputs` wraps the
engine's output stream (TextChunk or RequestOutput: anything with finish_reason and token
counts) and, when it ends, records `engine.queue` (only when an output carries
`queue_time_s`), `engine.prefill` (request start → first output; includes the queue wait
otherwise) and `engine.decode` (first output → last), from the timestamps it observed.

Spans go to the provider set with `setup_engine_tracing`/`use_tracer_provider`, else to the
process-global OpenTelemetry provider (a no-op until someone installs one).
"""
from __future__ import annotations

import time
from contextvars import ContextVar
from typing import AsyncIterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "inferplane.engine"
UNTRACED_PATHS = frozenset({"/metrics", "/health", "/kv/summary", "/stats"})
_PROPAGATOR = TraceContextTextMapPropagator()
_provider: trace.TracerProvider | None = None
# The request's server span: phase spans hang directly under it, whatever spans a framework
# opened in between.
_REQUEST_SPAN: ContextVar[trace.Span | None] = ContextVar("engine_request_span", default=None)


def setup_engine_tracing(service_name: str = "inferplane-engine", otlp_endpoint: str | None = None,
                         exporter: SpanExporter | None = None) -> TracerProvider:
    """A provider for the engine's spans: `exporter` synchronously (tests), OTLP/HTTP batched
    when `otlp_endpoint` is set and the OTLP exporter package is installed."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        endpoint = otlp_endpoint.rstrip("/")
        if not endpoint.endswith("/v1/traces"):
            endpoint += "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    use_tracer_provider(provider)
    return provider


def use_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Send engine spans to `provider` (None: back to the global provider)."""
    global _provider
    _provider = provider


def get_tracer() -> trace.Tracer:
    return (_provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)


def _headers(scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def extract_parent(headers: Mapping[str, str]) -> otel_context.Context:
    return _PROPAGATOR.extract({k.lower(): v for k, v in headers.items()})


class EngineTraceMiddleware:
    """Pure ASGI: a SERVER span per request, current for the whole (streamed) response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        name = f"engine {scope['method']} {scope['path']}"
        with get_tracer().start_as_current_span(
                name, context=extract_parent(_headers(scope)), kind=trace.SpanKind.SERVER,
                attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
        ) as span:
            token = _REQUEST_SPAN.set(span)

            async def send_status(message):
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(trace.Status(trace.StatusCode.ERROR))
                await send(message)
            try:
                await self.app(scope, receive, send_status)
            finally:
                _REQUEST_SPAN.reset(token)


class _Timeline:
    """Wall-clock nanosecond timestamps of one request's phases, as the server saw them."""

    def __init__(self) -> None:
        self.started_ns = time.time_ns()
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.queue_s: float | None = None
        self.last = None

    def observe(self, output) -> None:
        now = time.time_ns()
        if self.first_ns is None:
            self.first_ns = now
        self.last_ns = now
        self.last = output
        queue = getattr(output, "queue_time_s", None)
        if queue is not None and self.queue_s is None:
            self.queue_s = float(queue)


def _attributes(output) -> dict:
    if output is None:
        return {}
    names = {"prompt_tokens": "num_prompt_tokens", "completion_tokens": None,
             "cached_tokens": "num_cached_tokens"}
    out = {}
    for name, alt in names.items():
        value = getattr(output, name, None)
        if value is None and alt:
            value = getattr(output, alt, None)
        if isinstance(value, int):
            out[f"inferplane.{name}"] = value
    reason = getattr(output, "finish_reason", None)
    if reason:
        out["inferplane.finish_reason"] = reason
    return out


def _record(timeline: _Timeline, parent: otel_context.Context) -> None:
    tracer = get_tracer()
    end_ns = time.time_ns()
    first = timeline.first_ns or end_ns
    prefill_start = timeline.started_ns
    if timeline.queue_s is not None:
        queue_end = min(first, timeline.started_ns + int(timeline.queue_s * 1e9))
        tracer.start_span("engine.queue", context=parent,
                          start_time=timeline.started_ns).end(end_time=queue_end)
        prefill_start = queue_end
    prefill = tracer.start_span("engine.prefill", context=parent, start_time=prefill_start,
                                attributes={"inferplane.includes_queue": timeline.queue_s is None})
    prefill.end(end_time=first)
    if timeline.first_ns is not None:
        decode = tracer.start_span("engine.decode", context=parent, start_time=first,
                                   attributes=_attributes(timeline.last))
        decode.end(end_time=max(first, timeline.last_ns or end_ns))


async def traced_outputs(outputs: AsyncIterator) -> AsyncIterator:
    """Pass `outputs` through unchanged, recording the request's phases as child spans of the
    request's server span (EngineTraceMiddleware), else of the span current at the start."""
    request_span = _REQUEST_SPAN.get()
    parent = trace.set_span_in_context(request_span) if request_span is not None \
        else otel_context.get_current()
    timeline = _Timeline()
    try:
        async for output in outputs:
            timeline.observe(output)
            yield output
    finally:
        _record(timeline, parent)
        closer = getattr(outputs, "aclose", None)
        if closer is not None:
            await closer()

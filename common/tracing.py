"""OpenTelemetry tracing for the gateway: provider setup and W3C trace-context propagation.

A request's trace starts from the client's `traceparent` header (if any), and
the same trace id travels to the engine in the outgoing httpx request, so one
trace covers gateway admission, routing and the engine call.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar, Token
from urllib.parse import urlparse

import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

logger = logging.getLogger(__name__)

TRACER_NAME = "inferplane.gateway"
OTLP_TRACES_PATH = "/v1/traces"
_PROPAGATOR = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_tracers: dict[str, trace.Tracer] = {}   # of _provider, by name
_global_provider_set = False
_exporting = False   # a span processor is attached: spans have somewhere to go
# Before setup_tracing: the API's ProxyTracer looks the global provider up (in os.environ)
# on every span; this one answers at once with the invalid span.
_NOOP_TRACER = trace.NoOpTracer()


class _HeaderGetter(Getter):
    """Reads headers case-insensitively from httpx/Starlette headers or a plain dict."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None and isinstance(carrier, dict):
            value = next((v for k, v in carrier.items() if k.lower() == key), None)
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier.keys())


_GETTER = _HeaderGetter()


def setup_tracing(service_name: str, otlp_endpoint: str | None = None,
                  exporter: SpanExporter | None = None, *,
                  sample_ratio: float = 1.0) -> TracerProvider:
    """Create the tracer provider the gateway's spans go to.

    `exporter` (e.g. an InMemorySpanExporter) gets spans synchronously;
    `otlp_endpoint` (http://collector:4318) adds a batching OTLP/HTTP exporter
    when opentelemetry-exporter-otlp-proto-http is installed. Calling it again
    replaces the previous provider after flushing it.
    """
    global _provider, _global_provider_set, _exporting
    if not service_name:
        raise ValueError("setup_tracing needs a non-empty service_name")
    if not 0.0 <= sample_ratio <= 1.0:
        raise ValueError(f"sample_ratio must be within [0, 1], got {sample_ratio}")
    # Without a destination, spans are not recorded at all (they cost ~15% of a streamed
    # request); trace ids are still generated for logs, response headers and engines.
    sampled = exporter is not None or bool(otlp_endpoint)
    sampler = ParentBased(TraceIdRatioBased(sample_ratio) if sampled else ALWAYS_OFF)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                              sampler=sampler)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp_endpoint:
        otlp = _otlp_exporter(otlp_endpoint)
        if otlp is not None:
            provider.add_span_processor(BatchSpanProcessor(otlp))
    if _provider is not None:
        _provider.shutdown()
    _tracers.clear()
    _exporting = sampled
    if not _global_provider_set:
        # The global provider can be set once per process; libraries instrumented
        # with the OpenTelemetry API pick it up from there.
        trace.set_tracer_provider(provider)
        _global_provider_set = True
    _provider = provider
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter | None:
    parsed = urlparse(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"OTLP endpoint must be an http(s) URL, got {endpoint!r}")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        logger.warning("OTLP endpoint %s configured but opentelemetry-exporter-otlp-proto-http "
                       "is not installed (pip install 'inferplane[otlp]'); spans are not "
                       "exported", endpoint)
        return None
    if parsed.path in ("", "/"):
        endpoint = endpoint.rstrip("/") + OTLP_TRACES_PATH
    return OTLPSpanExporter(endpoint=endpoint)


def get_tracer(name: str = TRACER_NAME) -> trace.Tracer:
    """A tracer from the configured provider; a no-op tracer before setup_tracing."""
    if _provider is None:
        return _NOOP_TRACER
    # Cached: the SDK builds a new Tracer on every call, and this runs several times a request.
    tracer = _tracers.get(name)
    if tracer is None:
        tracer = _tracers[name] = _provider.get_tracer(name)
    return tracer


def shutdown_tracing() -> None:
    """Flush and stop exporters (call on gateway shutdown)."""
    global _provider, _exporting
    if _provider is not None:
        _provider.shutdown()
        _provider = None
    _exporting = False
    _tracers.clear()


def unrecorded_server_span(headers: Mapping[str, str]) -> trace.NonRecordingSpan:
    """The ids of a SERVER span when no exporter would record it: the caller's trace (and its
    sampled flag) continued, else a new one, and a span id of its own. What the tracer makes
    when nothing records its spans, without the tracer: a third of the cost per request."""
    parent = trace.get_current_span(extract_context(headers)).get_span_context() \
        if "traceparent" in headers else None
    if parent is not None and parent.is_valid:
        trace_id, flags = parent.trace_id, parent.trace_flags
    else:
        trace_id, flags = random.getrandbits(128) or 1, trace.TraceFlags(0)
    return trace.NonRecordingSpan(trace.SpanContext(trace_id, random.getrandbits(64) or 1,
                                                    is_remote=False, trace_flags=flags))


def unrecorded_child_span() -> trace.NonRecordingSpan:
    """A span id of its own under the current span's trace, for when no exporter would record
    a child span (what the SDK tracer makes then costs a span object, a sampler call and the
    attribute copies): engine requests still carry a traceparent of the request's trace."""
    parent = current_span_context()
    if not parent.is_valid:
        return trace.INVALID_SPAN
    return trace.NonRecordingSpan(trace.SpanContext(parent.trace_id, random.getrandbits(64) or 1,
                                                    is_remote=False,
                                                    trace_flags=parent.trace_flags))


def extract_context(headers: Mapping[str, str]) -> otel_context.Context:
    """The remote parent carried by an incoming request's traceparent/tracestate."""
    return _PROPAGATOR.extract(headers, getter=_GETTER)


def inject_traceparent(headers: MutableMapping[str, str] | None = None,
                       ctx: otel_context.Context | None = None) -> MutableMapping[str, str]:
    """Write traceparent (and tracestate) of the current span into `headers`."""
    carrier: MutableMapping[str, str] = {} if headers is None else headers
    bound = _UNRECORDED.get() if ctx is None else None
    if bound is None:
        _PROPAGATOR.inject(carrier, context=ctx)
    elif (unrecorded := bound[0]).is_valid:   # what the propagator writes, without the context
        carrier["traceparent"] = _traceparent(unrecorded)
        if unrecorded.trace_state:
            carrier["tracestate"] = unrecorded.trace_state.to_header()
    return carrier


async def httpx_trace_hook(request: httpx.Request) -> None:
    """httpx request event hook: `AsyncClient(event_hooks={"request": [httpx_trace_hook]})`."""
    inject_traceparent(request.headers)


@contextmanager
def server_span(name: str, headers: Mapping[str, str],
                attributes: Mapping[str, str | int | float | bool] | None = None,
                ) -> Iterator[trace.Span]:
    """A SERVER span for an incoming request, child of the caller's traceparent if sent."""
    parent = extract_context(headers)
    with get_tracer().start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER,
                                            attributes=attributes) as span:
        yield span


# While no exporter records spans every span of a request is only ids under one trace
# (unrecorded_server_span, unrecorded_child_span). The current one is kept here with its trace
# id in hex (log lines and the usage record read it, formatted once), not in OpenTelemetry's
# context, whose attach, detach and look-ups were a tenth of the request path's calls for ids
# nothing records.
_UNRECORDED: ContextVar[tuple[trace.SpanContext, str | None] | None] = ContextVar(
    "inferplane_unrecorded_span", default=None)


def bind_unrecorded_span(span: trace.Span) -> Token:
    """Make an unrecorded span (a request's server span, then its engine call's) current for
    `current_trace_id`, `trace_header_lines`, `inject_traceparent` and `unrecorded_child_span`
    until `reset_unrecorded_span(token)`."""
    ctx = span.get_span_context()
    return _UNRECORDED.set((ctx, trace.format_trace_id(ctx.trace_id) if ctx.is_valid else None))


def reset_unrecorded_span(token: Token) -> None:
    _UNRECORDED.reset(token)


def current_span_context() -> trace.SpanContext:
    """The ids of the current span: the unrecorded one bound for this request, else
    OpenTelemetry's current span's (invalid outside a trace)."""
    bound = _UNRECORDED.get()
    if bound is not None:
        return bound[0]
    return trace.get_current_span().get_span_context()


def current_trace_id() -> str | None:
    """Hex trace id of the active span, for logs and error bodies; None outside a trace."""
    bound = _UNRECORDED.get()
    if bound is not None and bound[1] is not None:
        return bound[1]
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return trace.format_trace_id(span_context.trace_id)


def tracing_configured() -> bool:
    return _provider is not None


def spans_exported() -> bool:
    """Whether spans are recorded anywhere (an exporter is configured)."""
    return _exporting


def configure_from_settings(tracing_settings) -> None:
    """Set up tracing at app creation. A provider configured earlier in the process (a test's
    in-memory exporter, or the control plane's) is kept unless an OTLP endpoint is given."""
    if not tracing_settings.enabled:
        return
    if _provider is None or tracing_settings.otlp_endpoint:
        setup_tracing(tracing_settings.service_name, tracing_settings.otlp_endpoint,
                      sample_ratio=tracing_settings.sample_ratio)


def child_span(name: str, attributes: Mapping[str, str | int | float | bool] | None = None):
    """`with child_span("gateway.limits") as span:` a span under the current one. With no
    exporter nothing would record it: the block runs under the current span (its ids are what
    engines and logs see either way), `span` takes attributes to no effect, and the request
    path builds no span objects (nor looks the current one up: five times a request)."""
    if not _exporting:
        return _UNRECORDED_CHILD
    return get_tracer().start_as_current_span(name, attributes=attributes)


_UNRECORDED_CHILD = nullcontext(trace.INVALID_SPAN)   # reusable: nullcontext keeps no state


def traceparent_of(span: trace.Span) -> str | None:
    """The W3C traceparent naming `span` (for response headers)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return _traceparent(ctx)


def _traceparent(ctx: trace.SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def trace_header_lines() -> bytes:
    """`traceparent: ...\\r\\n` (and `tracestate: ...` when the trace has one) naming the
    current span, for a request written by hand; b"" outside a trace. What the W3C propagator's
    `inject` writes, without its carrier dict and context lookups on every engine call."""
    ctx = current_span_context()
    if not ctx.is_valid:
        return b""
    lines = f"traceparent: {_traceparent(ctx)}\r\n"
    if ctx.trace_state:
        lines += f"tracestate: {ctx.trace_state.to_header()}\r\n"
    return lines.encode("latin-1")

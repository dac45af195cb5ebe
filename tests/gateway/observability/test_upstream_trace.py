"""gateway.observability.upstream_trace: the spans of one engine call, recorded when an
exporter takes them, and only a span id under the request's trace when none does."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common import tracing
from gateway.observability.upstream_trace import UpstreamTrace

BACKEND = SimpleNamespace(id="b1", engine="vllm", version="v1")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def engine_call() -> tuple[str, str]:
    """(the request's server span traceparent, what the engine request would carry)."""
    server = tracing.unrecorded_server_span({"traceparent": TRACEPARENT}) \
        if not tracing.spans_exported() else None
    with trace.use_span(server) if server else tracing.server_span("req", {
            "traceparent": TRACEPARENT}) as span:
        upstream = UpstreamTrace(BACKEND, attempt=1)
        with upstream.sending():
            sent = tracing.inject_traceparent({})["traceparent"]
        upstream.streaming()
        upstream.end(status=200, chunks=3)
        return tracing.traceparent_of(span), sent


@pytest.fixture
def no_exporter():
    tracing.setup_tracing("gw")
    yield
    tracing.shutdown_tracing()


def test_with_no_exporter_the_engine_gets_a_span_id_of_the_requests_trace(no_exporter):
    server, sent = engine_call()
    _, server_trace, server_span, flags = server.split("-")
    _, sent_trace, sent_span, sent_flags = sent.split("-")
    assert (sent_trace, sent_flags) == (server_trace, flags) == (TRACEPARENT.split("-")[1], "01")
    assert sent_span != server_span and len(sent_span) == 16 and int(sent_span, 16)


def test_outside_a_trace_the_engine_gets_no_traceparent(no_exporter):
    upstream = UpstreamTrace(BACKEND, attempt=1)
    with upstream.sending():
        assert tracing.inject_traceparent({}) == {}
    upstream.end(status=200)


def test_with_an_exporter_the_engine_call_is_recorded():
    exporter = InMemorySpanExporter()
    tracing.setup_tracing("gw", exporter=exporter)
    try:
        _, sent = engine_call()
    finally:
        tracing.shutdown_tracing()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"gateway.upstream", "gateway.first_token", "gateway.stream"} <= set(spans)
    assert spans["gateway.upstream"].attributes["inferplane.backend"] == "b1"
    assert sent.split("-")[2] == format(spans["gateway.first_token"].context.span_id, "016x")

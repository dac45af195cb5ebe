"""common.tracing: provider setup, W3C traceparent in and out, real HTTP propagation."""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common import tracing
from common.request_context import RequestContextMiddleware

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.setup_tracing("inferplane-gateway-test", exporter=exporter)
    yield exporter
    tracing.shutdown_tracing()


class _EchoTraceparent(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server naming)
        body = (self.headers.get("traceparent") or "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def echo_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoTraceparent)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_server_span_continues_the_callers_trace(spans):
    with tracing.server_span("chat.completions", {"Traceparent": TRACEPARENT},
                             attributes={"inferplane.model": "smollm2"}):
        assert tracing.current_trace_id() == TRACE_ID
    (span,) = spans.get_finished_spans()
    assert span.name == "chat.completions"
    assert span.kind == trace.SpanKind.SERVER
    assert trace.format_trace_id(span.context.trace_id) == TRACE_ID
    assert trace.format_span_id(span.parent.span_id) == PARENT_ID
    assert span.attributes["inferplane.model"] == "smollm2"
    assert span.resource.attributes["service.name"] == "inferplane-gateway-test"


def test_malformed_traceparent_starts_a_new_trace(spans):
    with tracing.server_span("chat.completions", {"traceparent": "00-zz-not-a-trace"}):
        trace_id = tracing.current_trace_id()
    assert trace_id and trace_id != TRACE_ID
    assert spans.get_finished_spans()[0].parent is None


def test_inject_writes_the_current_span(spans):
    with tracing.get_tracer().start_as_current_span("route") as span:
        headers = tracing.inject_traceparent()
        ctx = span.get_span_context()
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 0x01, "sampled flag set"
    assert trace_id == trace.format_trace_id(ctx.trace_id)
    assert span_id == trace.format_span_id(ctx.span_id)


@pytest.mark.parametrize("incoming", [
    {"traceparent": TRACEPARENT},
    {"traceparent": TRACEPARENT, "tracestate": "vendor=abc,other=1"},
    {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}])   # not sampled: flags carried as 00
def test_trace_header_lines_are_what_the_propagator_injects(spans, incoming):
    with tracing.get_tracer().start_as_current_span(
            "engine.call", context=tracing.extract_context(incoming)):
        lines = tracing.trace_header_lines()
        injected = tracing.inject_traceparent()
    sent = dict(line.split(": ", 1) for line in lines.decode("latin-1").split("\r\n") if line)
    assert sent == injected and sent["traceparent"].split("-")[1] == TRACE_ID
    assert lines.endswith(b"\r\n")


def test_no_trace_header_lines_outside_a_span(spans):
    assert tracing.trace_header_lines() == b""


def test_nothing_is_injected_outside_a_span(spans):
    assert tracing.inject_traceparent({"x": "1"}) == {"x": "1"}
    assert tracing.current_trace_id() is None


async def test_httpx_hook_sends_traceparent_over_real_http(spans, echo_url):
    async with httpx.AsyncClient(event_hooks={"request": [tracing.httpx_trace_hook]}) as client:
        with tracing.server_span("chat.completions", {"traceparent": TRACEPARENT}):
            with tracing.get_tracer().start_as_current_span("engine.call") as span:
                response = await client.get(echo_url)
                span_id = trace.format_span_id(span.get_span_context().span_id)
    version, trace_id, sent_span_id, _flags = response.text.split("-")
    assert (version, trace_id, sent_span_id) == ("00", TRACE_ID, span_id)


def test_extract_reads_httpx_headers(spans):
    ctx = tracing.extract_context(httpx.Headers({"TRACEPARENT": TRACEPARENT}))
    parent = trace.get_current_span(ctx).get_span_context()
    assert trace.format_trace_id(parent.trace_id) == TRACE_ID
    assert parent.is_remote


def test_zero_sample_ratio_records_nothing():
    exporter = InMemorySpanExporter()
    tracing.setup_tracing("gw", exporter=exporter, sample_ratio=0.0)
    try:
        with tracing.get_tracer().start_as_current_span("dropped"):
            pass
        assert exporter.get_finished_spans() == ()
    finally:
        tracing.shutdown_tracing()


def test_setting_up_again_moves_spans_to_the_new_exporter():
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    tracing.setup_tracing("gw", exporter=first)
    tracing.setup_tracing("gw", exporter=second)
    try:
        with tracing.get_tracer().start_as_current_span("after"):
            pass
        assert first.get_finished_spans() == ()
        assert [s.name for s in second.get_finished_spans()] == ["after"]
    finally:
        tracing.shutdown_tracing()


def test_otlp_without_the_exporter_package_warns_and_keeps_running(caplog):
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
        installed = True
    except ImportError:
        installed = False
    with caplog.at_level(logging.WARNING, logger="common.tracing"):
        provider = tracing.setup_tracing("gw", otlp_endpoint="http://127.0.0.1:4318")
    tracing.shutdown_tracing()
    assert provider is not None
    assert installed or "not installed" in caplog.text


def test_bad_arguments_are_rejected_clearly():
    with pytest.raises(ValueError, match="http"):
        tracing.setup_tracing("gw", otlp_endpoint="collector:4318")
    with pytest.raises(ValueError, match="service_name"):
        tracing.setup_tracing("")
    with pytest.raises(ValueError, match="sample_ratio"):
        tracing.setup_tracing("gw", sample_ratio=2.0)


async def test_with_no_exporter_the_callers_trace_goes_on_without_spans_made():
    """Nothing records spans: the middleware carries ids only (no tracer work per request),
    yet the caller's trace continues to engines and back in the answer's traceparent."""
    tracing.setup_tracing("gw")
    seen: list[tuple[str | None, str | None]] = []

    async def app(scope, receive, send):
        outgoing = tracing.inject_traceparent({}).get("traceparent")   # what engines get
        seen.append((tracing.current_trace_id(), outgoing))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    transport = httpx.ASGITransport(RequestContextMiddleware(app))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            continued = await client.get("/v1/x", headers={"traceparent": TRACEPARENT})
            fresh = await client.get("/v1/x")
    finally:
        tracing.shutdown_tracing()
    (trace_id, outgoing), (new_trace, _) = seen
    assert trace_id == TRACE_ID and outgoing.startswith(f"00-{TRACE_ID}-")
    answered = continued.headers["traceparent"].split("-")
    assert answered[1] == TRACE_ID and answered[2] != PARENT_ID and answered[3] == "01"
    assert outgoing == continued.headers["traceparent"]   # the engine's parent is this span
    assert new_trace and len(new_trace) == 32 and new_trace != TRACE_ID
    version, trace, span, flags = fresh.headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", new_trace, "00") and len(span) == 16


@pytest.mark.parametrize("incoming", [TRACEPARENT, None])
def test_without_an_exporter_the_request_trace_id_is_read_once_and_agrees(incoming):
    """No exporter: the ids the request's code reads (log lines and usage through
    current_trace_id, the engine's traceparent) all name the trace the response answers, the
    caller's when sent; outside the request current_trace_id is None again."""
    import asyncio

    tracing.setup_tracing("inferplane-gateway-test")
    seen = {}

    async def app(scope, receive, send):
        seen["trace_id"] = tracing.current_trace_id()
        with tracing.child_span("gateway.limits"):
            seen["engine"] = tracing.trace_header_lines().decode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent = []

    async def send(message):
        sent.append(message)

    headers = [(b"traceparent", incoming.encode())] if incoming else []
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": headers}
    try:
        asyncio.run(RequestContextMiddleware(app)(scope, None, send))
        answered = dict(sent[0]["headers"])[b"traceparent"].decode().split("-")[1]
        assert seen["trace_id"] == answered
        assert seen["engine"].startswith(f"traceparent: 00-{answered}-")
        if incoming:
            assert answered == TRACE_ID
        assert tracing.current_trace_id() is None
    finally:
        tracing.shutdown_tracing()


async def test_with_no_exporter_httpx_calls_carry_the_current_unrecorded_span(echo_url):
    """No exporter: unrecorded spans never enter OpenTelemetry's context, yet an httpx call
    made with the hook (the moderation and embedding calls) names the request's server span,
    or the engine call's child span while it is bound, over real HTTP."""
    tracing.setup_tracing("inferplane-gateway-test")
    seen = {}

    async def app(scope, receive, send):
        async with httpx.AsyncClient(event_hooks={"request": [tracing.httpx_trace_hook]}) as c:
            seen["server"] = (await c.get(echo_url)).text
            child = tracing.unrecorded_child_span()
            token = tracing.bind_unrecorded_span(child)
            try:
                seen["child"] = (await c.get(echo_url)).text
            finally:
                tracing.reset_unrecorded_span(token)
            seen["child_id"] = trace.format_span_id(child.get_span_context().span_id)
            seen["after"] = (await c.get(echo_url)).text
        assert trace.get_current_span() is trace.INVALID_SPAN   # nothing attached
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    transport = httpx.ASGITransport(RequestContextMiddleware(app))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            answered = (await client.get("/v1/x", headers={"traceparent": TRACEPARENT}))
    finally:
        tracing.shutdown_tracing()
    assert seen["server"] == seen["after"] == answered.headers["traceparent"]
    _, trace_id, span_id, flags = seen["child"].split("-")
    assert (trace_id, span_id, flags) == (TRACE_ID, seen["child_id"], "01")
    assert span_id != answered.headers["traceparent"].split("-")[2]
    assert tracing.inject_traceparent({}) == {}   # the request's spans are unbound after it

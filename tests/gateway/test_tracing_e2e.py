"""One trace across gateway and engine: both apps served by uvicorn in this process, spans
collected by one InMemorySpanExporter; logs and response headers carry the same ids."""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import threading
import time

import pytest
import uvicorn
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import builtin_engine.serving.server as engine_server
from builtin_engine.cli import build_engine
from builtin_engine.core.config import EngineConfig
from builtin_engine.serving import tracing as engine_tracing
from common import tracing
from common.logging_setup import configure_logging
from common.metric_names import Metric
from registry.snapshot import BackendView
from tests.gateway.conftest import KEYS, default_keys, free_port, key, model

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _instrumented_engine_app(monkeypatch):
    engine, tokenizer, served, max_len = build_engine(EngineConfig(
        simulate=True, served_model_name="traced", sim_decode_base_s=0.001))
    if "traced_outputs" not in inspect.getsource(engine_server):
        # the server's two tracing lines, for as long as it does not carry them itself
        plain = engine_server.generate_text
        monkeypatch.setattr(engine_server, "generate_text",
                            lambda *a, **kw: engine_tracing.traced_outputs(plain(*a, **kw)))
    app = engine_server.create_engine_app(engine, tokenizer, served, max_len)
    if not any(m.cls is engine_tracing.EngineTraceMiddleware for m in app.user_middleware):
        app.add_middleware(engine_tracing.EngineTraceMiddleware)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        engine.start()
        yield
        await engine.shutdown(2.0)

    app.router.lifespan_context = lifespan
    return app


def _serve(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture
def stack(monkeypatch, make_gateway):
    exporter = InMemorySpanExporter()
    provider = tracing.setup_tracing("inferplane-test", exporter=exporter)
    engine_tracing.use_tracer_provider(provider)
    logs = io.StringIO()
    configure_logging("INFO", stream=logs, flush_interval_s=0)   # lines read at once
    engine_url, server, thread = _serve(_instrumented_engine_app(monkeypatch))
    backend = BackendView(id="eng", url=engine_url + "/v1", engine="builtin",
                          served_model="traced", gpu=None, weight=1.0, tier="hot",
                          state="ready", adapters=(), version="v1")
    keys = {**default_keys()}
    limited = key("only_other", models=("m",), rpm=1)
    keys[limited.key_hash] = limited
    gw = make_gateway([model("m", [backend])], keys=keys, log_json=False)
    yield gw, exporter, logs
    server.should_exit = True
    thread.join(timeout=10)
    engine_tracing.use_tracer_provider(None)
    tracing.shutdown_tracing()
    logging.getLogger().handlers = [h for h in logging.getLogger().handlers
                                    if not getattr(h, "_inferplane_json", False)]


def _by_name(spans, trace_id: int) -> dict:
    return {s.name: s for s in spans if s.context.trace_id == trace_id}


def test_one_trace_covers_gateway_and_engine(stack):
    gw, exporter, logs = stack
    body = {"model": "m", "messages": [{"role": "user", "content": "trace me"}],
            "max_tokens": 4, "stream": True}
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=body, headers={
            "traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01", "x-request-id": "req-42"})
        assert r.status_code == 200 and "[DONE]" in r.text
    assert r.headers["x-request-id"] == "req-42"
    assert r.headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")
    time.sleep(0.2)     # the engine's last span ends as its stream closes
    spans = _by_name(exporter.get_finished_spans(), int(CLIENT_TRACE, 16))
    gateway = {"POST /v1/chat/completions", "gateway.auth", "gateway.limits", "gateway.queue",
               "gateway.route", "gateway.upstream", "gateway.first_token", "gateway.stream"}
    engine = {"engine POST /v1/chat/completions", "engine.queue", "engine.prefill",
              "engine.decode"}
    assert gateway | engine <= set(spans), sorted(spans)
    root = spans["POST /v1/chat/completions"]
    assert root.kind == trace.SpanKind.SERVER and root.parent.span_id == 0x00f067aa0ba902b7
    assert spans["gateway.upstream"].parent.span_id == root.context.span_id
    engine_root = spans["engine POST /v1/chat/completions"]
    assert engine_root.parent.span_id == spans["gateway.first_token"].context.span_id
    assert spans["engine.prefill"].attributes["inferplane.includes_queue"] is False
    for phase in ("engine.queue", "engine.prefill", "engine.decode"):
        assert spans[phase].parent.span_id == engine_root.context.span_id
    assert spans["engine.decode"].attributes["inferplane.completion_tokens"] == 4
    assert spans["gateway.route"].attributes["inferplane.backend"] == "eng"
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    finished = [x for x in lines if x["msg"] == "request finished"]
    assert finished and finished[-1]["trace_id"] == CLIENT_TRACE
    assert finished[-1]["request_id"] == "req-42" and finished[-1]["status"] == 200


def test_rejections_are_counted_and_carry_ids(stack):
    gw, exporter, _ = stack
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with gw.client("only_other") as c:
        assert c.post("/v1/chat/completions", json=body).status_code == 200
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 429
    assert len(r.headers["x-request-id"]) == 32
    trace_id = int(r.headers["traceparent"].split("-")[1], 16)
    assert "gateway.limits" in _by_name(exporter.get_finished_spans(), trace_id)
    sample = gw.state.metrics.registry.get_sample_value
    assert sample(Metric.REQUESTS.total, {"model": "m", "version": "none",
                                                "code": "429"}) == 1
    assert sample(Metric.REQUESTS.total, {"model": "m", "version": "v1",
                                                "code": "200"}) == 1
    assert KEYS["only_other"]

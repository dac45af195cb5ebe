"""The engine load poller: every tick for engines that answer, less and less often for
backends whose /metrics fails."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gateway.routing.load_poll import MAX_BACKOFF_S, PollBackoff
from tests.gateway.conftest import backend, model


def test_backoff_doubles_caps_and_resets():
    b = PollBackoff()
    assert b.due("x", 0.0)
    b.failed("x", 10.0, 1.0)
    assert not b.due("x", 11.9) and b.due("x", 12.0)      # 2 s after one failure
    b.failed("x", 12.0, 1.0)
    assert not b.due("x", 15.9) and b.due("x", 16.0)      # then 4 s
    for _ in range(20):
        b.failed("x", 100.0, 1.0)
    assert b.next_at["x"] == 100.0 + MAX_BACKOFF_S        # capped
    b.succeeded("x")
    assert b.due("x", 0.0) and "x" not in b.failures
    b.failed("y", 0.0, 1.0)
    b.keep_only({"x"})                                    # y left the snapshot: forgotten
    assert b.due("y", 0.0) and not b.failures


class _NoMetrics(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is no engine: /metrics is a 404."""
    hits = 0

    def do_GET(self):
        type(self).hits += 1
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def no_metrics_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoMetrics)
    _NoMetrics.hits = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_backend_without_metrics_is_polled_less_and_less(make_gateway, engines,
                                                           no_metrics_server):
    silent = replace(backend(engines[0]), id="silent", url=no_metrics_server)
    gw = make_gateway([model("m", [backend(engines[0]), silent])],
                      routing={"load_poll_interval_s": 0.05})
    time.sleep(1.6)     # 32 ticks: failures at ~0, 0.1, 0.3, 0.7, 1.5 s
    assert gw.state.router.book.engine["e0"].kv_usage == pytest.approx(0.1)   # every tick
    assert 3 <= _NoMetrics.hits <= 6
    assert "silent" not in gw.state.router.book.engine

"""control_plane.rollouts.prometheus_source: PromQL templates, the conversion of instant
vectors into the analysis' counts, and every way a query can fail (→ MetricsUnavailable).

Prometheus' answers are served by a small local HTTP server here, to give exact vectors and
broken answers; tests/e2e/rollouts/test_prometheus_analysis.py runs the real one."""
from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from control_plane.rollouts.metrics_source import MetricsUnavailable, Scrape, parse_metrics
from control_plane.rollouts.prometheus_source import QUERIES, PrometheusMetricsSource, render
from control_plane.settings import AnalysisSettings, PrometheusAnalysis
from tests.conftest import free_port


def vector(*rows: tuple[dict, float | str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [0, str(value)]} for labels, value in rows]}}


class FakePrometheus:
    """Answers /api/v1/query with `answer(query, time)`; records what it was asked."""

    def __init__(self, answer):
        self.answer, self.asked = answer, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                params = parse_qs(urlsplit(self.path).query)
                outer.asked.append((params["query"][0], float(params["time"][0])))
                status, body = outer.answer(params["query"][0])
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus():
    servers = []

    def start(answer):
        servers.append(FakePrometheus(answer))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def source_for(url: str, **settings) -> PrometheusMetricsSource:
    return PrometheusMetricsSource(PrometheusAnalysis(url=url, lag_s=0, **settings),
                                   clock=lambda: 1000.0)


def test_templates_fill_window_and_selector():
    query = render(QUERIES["requests"][1], 59.2, 'job="gw"')
    assert query == ('sum by (model, version, code) '
                     '(increase(inferplane_requests_total{job="gw"}[60s]))')
    assert render(QUERIES["duration"][1], 0.2, "").endswith("_bucket{}[1s]))")


def test_settings_refuse_what_cannot_work():
    with pytest.raises(ValidationError, match="needs analysis.prometheus.url"):
        AnalysisSettings(source="prometheus")
    with pytest.raises(ValidationError, match="window"):
        PrometheusAnalysis(url="http://p:9090", queries={"requests": "sum(up)"})
    with pytest.raises(ValidationError):
        PrometheusAnalysis(url="http://p:9090", queries={"bogus": "x[{{ window }}]"})
    with pytest.raises(ValidationError):
        PrometheusAnalysis(url="prometheus:9090")


def answers_for_interval(query: str):
    if "inferplane_requests_total" in query:
        return 200, vector(({"model": "m", "version": "v2", "code": "200"}, 18),
                           ({"model": "m", "version": "v2", "code": "503"}, 2),
                           ({"model": "m", "version": "v1", "code": "200"}, "NaN"))
    if "inferplane_request_duration_seconds_bucket" in query:
        return 200, vector(({"model": "m", "version": "v2", "le": "0.1"}, 10),
                           ({"model": "m", "version": "v2", "le": "1.0"}, 20),
                           ({"model": "m", "version": "v2", "le": "+Inf"}, 20))
    return 200, vector()


async def test_an_interval_is_one_promql_range_per_family(prometheus):
    server = prometheus(answers_for_interval)
    source = source_for(server.url, selector='job="gw"')
    later = await source.scrape()
    delta = later.since(Scrape(taken_at=later.taken_at - 30))
    v2 = delta.get("m", "v2")
    assert (v2.requests, v2.errors) == (20, 2)
    assert v2.duration.count == 20 and v2.duration.buckets[math.inf] == 20
    assert v2.duration.quantile(0.5) == pytest.approx(0.1)
    assert delta.get("m", "v1").requests == 0          # NaN (no samples) is no traffic
    ranges = [q for q, _ in server.asked if "increase(" in q]
    assert len(ranges) == len(QUERIES)
    assert all("[30s]" in q and 'job="gw"' in q for q in ranges)
    assert {at for _, at in server.asked} == {1000.0}  # evaluated at the later scrape's time


async def test_operator_templates_replace_the_defaults(prometheus):
    server = prometheus(lambda query: (200, vector()))
    source = source_for(server.url, queries={
        "requests": "sum by (model, version, code) (increase(gw:requests[{{ window }}]))"})
    (await source.scrape()).over(10)
    assert "sum by (model, version, code) (increase(gw:requests[10s]))" in \
        [q for q, _ in server.asked]


@pytest.mark.parametrize("status, body", [
    (400, {"status": "error", "error": "parse error"}),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
    (200, "not json at all"),
])
async def test_a_bad_answer_is_no_metrics(prometheus, status, body):
    server = prometheus(lambda query: (status, body))
    with pytest.raises(MetricsUnavailable):
        await source_for(server.url).scrape()


async def test_prometheus_down_is_no_metrics_at_scrape_and_at_measure(prometheus):
    server = prometheus(lambda query: (200, vector()))
    scrape = await source_for(server.url).scrape()
    server.close()
    with pytest.raises(MetricsUnavailable):
        scrape.over(60)
    with pytest.raises(MetricsUnavailable):
        await source_for(f"http://127.0.0.1:{free_port()}", timeout_s=1).scrape()


def test_a_direct_scrape_window_is_its_delta_from_the_baseline():
    line = 'inferplane_requests_total{{model="m",version="v1",code="200"}} {}\n'
    earlier, later = parse_metrics(line.format(5), 5.0), parse_metrics(line.format(12), 10.0)
    assert later.window(earlier, 60).get("m", "v1").requests == 7
    assert later.window(None, 60).get("m", "v1").requests == 12   # since the gateways started

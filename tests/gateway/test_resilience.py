"""Retries before the first byte, fallbacks, timeouts and breakers — no duplicated output."""
import pytest

from common.metric_names import Metric
from tests.gateway.conftest import backend, chat_body, model
from tests.gateway.test_errors import assert_openai_error
from tests.gateway.test_streaming import content, events


def metric(gw, line_start: str) -> float:
    with gw.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def two(make_gateway, engines):
    return make_gateway([model("m", [backend(engines[0]), backend(engines[1])],
                               fallbacks=("fb",)),
                         model("fb", [backend(engines[2])])],
                        timeouts={"first_token": 0.5}, retries=1)


def test_retry_on_5xx_goes_to_another_backend(two, engines):
    engines[0].control(fail_status=500)
    with two.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert r.status_code == 200 and r.json()["backend"] == "e1"
    assert [e.stats()["requests"] for e in engines] == [1, 1, 0]
    assert metric(two, f'{Metric.RETRIES.total}{{model="m"}}') == 1
    assert metric(two, f'{Metric.UPSTREAM_ERRORS.total}{{backend="e0",kind="http_5xx"') == 1


def test_stream_retry_sends_output_once(two, engines):
    engines[0].control(fail_status=503)
    with two.client() as c, c.stream("POST", "/v1/chat/completions",
                                     json=chat_body(stream=True, max_tokens=3)) as r:
        evts = events(r)
    assert content(evts) == "tok0 tok1 tok2 "
    assert {e["backend"] for e in evts if isinstance(e, dict)} == {"e1"}


def test_first_token_timeout_retries_elsewhere(two, engines):
    engines[0].control(first_token_delay=3.0)
    with two.client() as c, c.stream("POST", "/v1/chat/completions",
                                     json=chat_body(stream=True, max_tokens=2)) as r:
        evts = events(r)
    assert content(evts) == "tok0 tok1 "
    assert {e["backend"] for e in evts if isinstance(e, dict)} == {"e1"}


def test_fallback_model_when_all_backends_fail(two, engines):
    engines[0].control(fail_status=500)
    engines[1].control(fail_status=502)
    with two.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert r.status_code == 200 and r.json()["backend"] == "e2"
    assert r.json()["model"] == "m"
    assert metric(two, f'{Metric.FALLBACKS.total}{{model="m"}}') == 1


def test_everything_failing_is_502(two, engines):
    for e in engines:
        e.control(fail_status=500)
    with two.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body())
    assert_openai_error(r, 502, code="http_5xx")


def test_engine_down_is_a_connect_error_and_retried(make_gateway, engines):
    from tests.gateway.conftest import FakeEngine, free_port
    dead = FakeEngine("dead", free_port(), None)
    gw = make_gateway([model("m", [backend(dead), backend(engines[0])])])
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body())
    assert r.status_code == 200 and r.json()["backend"] == "e0"
    assert metric(gw, f'{Metric.UPSTREAM_ERRORS.total}{{backend="dead",kind="connect"') == 1


def test_breaker_opens_and_stops_traffic(make_gateway, engines):
    gw = make_gateway([model("m", [backend(engines[0]), backend(engines[1])])],
                      breaker={"failure_threshold": 2, "open_seconds": 60})
    engines[0].control(fail_status=500)
    with gw.client() as c:
        codes = [c.post("/v1/chat/completions", json=chat_body()).status_code for _ in range(8)]
    assert codes == [200] * 8
    assert engines[0].stats()["requests"] == 2       # then the breaker kept it out
    assert metric(gw, f'{Metric.CIRCUIT_BREAKER_STATE}{{backend="e0"}}') == 2

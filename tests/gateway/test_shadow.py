"""Shadow traffic over real HTTP: copies reach the shadow version, are measured, and never
delay or fail the primary."""
from __future__ import annotations

import time

import pytest

from common.metric_names import Metric
from registry.snapshot import SplitView
from tests.gateway.conftest import backend, chat_body, model

SPLITS = (SplitView("v1", 1.0), SplitView("v2", 1.0, shadow=True))


def _shadow_model(engines, splits=SPLITS):
    return model("m", [backend(engines[0], version="v1"), backend(engines[1], version="v2")],
                 splits=splits)


def _sample(gw, name: str, **labels) -> float:
    return gw.state.metrics.registry.get_sample_value(name, labels) or 0.0


def _wait_for(gw, name: str, value: float, timeout: float = 10.0, **labels) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = _sample(gw, name, **labels)
        if got >= value:
            return got
        time.sleep(0.02)
    return _sample(gw, name, **labels)


@pytest.mark.parametrize("stream", [False, True])
def test_copy_reaches_shadow_version_and_is_compared(engines, make_gateway, stream):
    gw = make_gateway([_shadow_model(engines)])
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=4, stream=stream))
        assert r.status_code == 200
    ok = _wait_for(gw, Metric.SHADOW_REQUESTS.total, 1, model="m", version="v2",
                   outcome="ok")
    assert ok == 1
    assert engines[1].stats()["requests"] == 1
    shadow_body = engines[1].stats()["last_body"]
    assert shadow_body["stream"] is True and shadow_body["model"] == "served-m"
    # identical answers from both fake engines: similarity 1, length ratio 1
    assert _sample(gw, f"{Metric.SHADOW_SIMILARITY}_sum", model="m") == pytest.approx(1.0)
    assert _sample(gw, f"{Metric.SHADOW_LENGTH_RATIO}_sum", model="m") == pytest.approx(1.0)
    assert _sample(gw, f"{Metric.SHADOW_REQUEST_DURATION}_count",
                   model="m", version="v2") == 1
    assert _sample(gw, f"{Metric.SHADOW_TIME_TO_FIRST_TOKEN}_count",
                   model="m", version="v2") == 1
    # client-facing totals only count the primary
    assert _sample(gw, Metric.REQUESTS.total, model="m", version="v1", code="200") == 1
    assert _sample(gw, Metric.REQUESTS.total, model="m", version="v2", code="200") == 0


def test_failing_shadow_never_fails_the_primary(engines, make_gateway):
    engines[1].control(fail_status=500)
    gw = make_gateway([_shadow_model(engines)])
    with gw.client() as c:
        for stream in (False, True):
            r = c.post("/v1/chat/completions", json=chat_body(max_tokens=3, stream=stream))
            assert r.status_code == 200 and "tok2" in r.text
    assert _wait_for(gw, Metric.SHADOW_REQUESTS.total, 2, model="m", version="v2",
                     outcome="error") == 2
    assert _sample(gw, Metric.REQUESTS.total, model="m", version="v1", code="200") == 2


def test_slow_shadow_does_not_delay_the_primary_and_times_out(engines, make_gateway):
    engines[1].control(first_token_delay=3.0)
    gw = make_gateway([_shadow_model(engines)], shadow={"timeout_s": 1.0})
    with gw.client() as c:
        c.post("/v1/chat/completions", json=chat_body(max_tokens=2))   # warm connections
        for stream in (False, True):
            started = time.perf_counter()
            r = c.post("/v1/chat/completions", json=chat_body(max_tokens=3, stream=stream))
            elapsed = time.perf_counter() - started
            assert r.status_code == 200 and "tok2" in r.text
            assert elapsed < 0.75, f"primary took {elapsed:.2f}s behind a 3s shadow"
    assert _wait_for(gw, Metric.SHADOW_REQUESTS.total, 3, model="m", version="v2",
                     outcome="timeout") == 3


def test_saturated_mirror_drops_copies(engines, make_gateway):
    engines[1].control(first_token_delay=2.0)
    gw = make_gateway([_shadow_model(engines)], shadow={"max_concurrent": 1, "timeout_s": 5})
    with gw.client() as c:
        for _ in range(3):
            assert c.post("/v1/chat/completions", json=chat_body(max_tokens=2)).status_code == 200
    assert _sample(gw, Metric.SHADOW_REQUESTS.total, model="m", version="v2",
                   outcome="dropped") == 2
    assert gw.state.shadow.running == 1


def test_shadow_weight_zero_and_missing_backend(engines, make_gateway):
    splits = (SplitView("v1", 1.0), SplitView("v3", 1.0, shadow=True))
    gw = make_gateway([_shadow_model(engines, splits)])
    with gw.client() as c:
        assert c.post("/v1/chat/completions", json=chat_body(max_tokens=2)).status_code == 200
    assert _sample(gw, Metric.SHADOW_REQUESTS.total, model="m", version="v3",
                   outcome="no_backend") == 1
    off = (SplitView("v1", 1.0), SplitView("v2", 0.0, shadow=True))
    gw = make_gateway([_shadow_model(engines, off)])
    with gw.client() as c:
        assert c.post("/v1/chat/completions", json=chat_body(max_tokens=2)).status_code == 200
    time.sleep(0.2)
    assert engines[1].stats()["requests"] == 0

"""Measurements on interval deltas, and error budgets over SLO windows."""

from __future__ import annotations

from prometheus_client import generate_latest

from control_plane.rollouts.analysis import measure
from control_plane.rollouts.metrics_source import parse_metrics
from control_plane.rollouts.spec import Analysis
from registry import queries as q
from registry.orm.slos import Slo
from tests.control_plane.rollouts.conftest import MODEL, Traffic


def scrape_at(traffic: Traffic, t: float):
    return parse_metrics(generate_latest(traffic.metrics.registry).decode(), taken_at=t)


def run(traffic: Traffic, **spec):
    delta = scrape_at(traffic, 0)
    return measure(delta, MODEL, "v1", "v2", Analysis(min_requests=20, **spec), 60.0)


def test_error_rate_ratio_to_stable():
    traffic = Traffic()
    traffic.send("v1", 96)
    traffic.send("v1", 4, code="500")  # stable 4%
    traffic.send("v2", 94)
    traffic.send("v2", 6, code="500")  # candidate 6%
    assert run(traffic, max_error_rate={"ratio_to_stable": 2.0}).verdict == "pass"
    failed = run(traffic, max_error_rate={"ratio_to_stable": 1.2})
    assert failed.verdict == "fail" and "error_rate 0.06 exceeds 0.048" in failed.message
    assert run(traffic, max_error_rate=0.05).verdict == "fail"


def test_ratio_against_an_error_free_stable_tolerates_one_errors_worth():
    traffic = Traffic()
    traffic.send("v1", 100)
    traffic.send("v2", 99)
    traffic.send("v2", 1, code="500")
    assert run(traffic, max_error_rate={"ratio_to_stable": 1.0}).verdict == "pass"
    traffic.send("v2", 1, code="500")
    assert run(traffic, max_error_rate={"ratio_to_stable": 1.0}).verdict == "fail"


def test_ttft_ratio_and_missing_ttft():
    traffic = Traffic()
    traffic.send("v1", 30, ttft_s=0.1)
    traffic.send("v2", 30)  # no streamed requests: nothing to compare, not a failure
    assert run(traffic, max_ttft_p95_ratio=1.2).verdict == "pass"
    traffic.send("v2", 30, ttft_s=0.4)
    result = run(traffic, max_ttft_p95_ratio=1.2)
    assert result.verdict == "fail" and result.checks[0].name == "ttft_p95_s"


def test_inconclusive_names_the_short_side():
    traffic = Traffic()
    traffic.send("v1", 5)
    traffic.send("v2", 50)
    result = run(traffic, max_error_rate=0.1)
    assert result.verdict == "inconclusive"
    assert result.message == "stable 'v1' served 5 requests, fewer than min_requests=20"


def test_a_measurement_carries_the_numbers_behind_its_verdict():
    traffic = Traffic()
    traffic.send("v1", 40, latency_s=0.1)
    traffic.send("v2", 15, latency_s=0.3)
    traffic.send("v2", 5, code="502", latency_s=0.3)
    traffic.send("v1", 3, model=f"{MODEL}:prod")  # an alias's traffic counts for its model
    result = run(traffic, max_error_rate=0.05).as_dict()
    assert result["verdict"] == "fail" and result["model_requests"] == 63
    assert (result["candidate"]["requests"], result["candidate"]["errors"]) == (20, 5)
    assert result["candidate"]["error_rate"] == 0.25 and result["stable"]["error_rate"] == 0.0
    assert 0.25 <= result["candidate"]["p95_latency_s"] <= 0.5
    assert result["stable"]["p95_latency_s"] <= 0.1 and result["stable"]["requests"] == 43
    assert result["thresholds"]["min_requests"] == 20
    assert result["thresholds"]["max_error_rate"] == 0.05 and result["idle"] is False


def test_budget_counts_only_the_window(sessions, slo, clock):
    with sessions.begin() as s:
        s.add(Slo(model_id=None, name="availability", metric="availability",
                  objective=0.9, window_s=3600))
        s.add(Slo(model_id=q.get_model(s, MODEL).id, name="latency", metric="latency",
                  objective=0.5, threshold_ms=200, window_s=3600))
    traffic = Traffic()
    traffic.send("v1", 10, code="500", latency_s=1.0)  # old errors, soon out of the window
    slo.observe(scrape_at(traffic, clock()))
    with sessions() as s:
        fresh = {b.slo: b for b in slo.budgets(s, MODEL)}
    assert abs(fresh["availability"].remaining - (1 - 10 / 1)) < 1e-9  # 10 bad, 1 allowed
    assert fresh["latency"].bad == 10

    clock.advance(3601)
    traffic.send("v1", 100, latency_s=0.1)
    slo.observe(scrape_at(traffic, clock()))
    with sessions() as s:
        later = {b.slo: b for b in slo.budgets(s, MODEL)}
        assert slo.nearly_spent(s, MODEL) == []
    assert (later["availability"].total, later["availability"].bad) == (100, 0)
    assert later["availability"].remaining == 1.0 and later["latency"].bad == 0
    exported = {(b.model, b.slo) for b in slo.export()}
    assert exported == {(MODEL, "availability"), (MODEL, "latency")}

"""One vocabulary of breaker states: the gauge a real breaker sets, the alert's threshold, the
alert unit tests' input and the dashboard's scale all read BreakerState (common.vocabulary)."""
from __future__ import annotations

import json
import re

import yaml

from common.metric_names import Metric
from gateway.observability.metrics import GatewayMetrics
from gateway.traffic.breaker import BreakerConfig, BreakerRegistry, BreakerState
from tests.observability.metric_names import DASHBOARD_DIR, ROOT, rules


def gauge_value(metrics: GatewayMetrics, backend: str) -> float:
    return metrics.registry.get_sample_value(Metric.CIRCUIT_BREAKER_STATE,
                                             {"backend": backend})


def test_codes_rise_with_severity():
    assert [s.code for s in BreakerState] == [0, 1, 2]
    assert BreakerState.legend() == "0 closed, 1 half-open, 2 open"


def test_an_open_breaker_sets_the_code_the_alert_fires_on():
    metrics = GatewayMetrics()
    clock = [0.0]
    breakers = BreakerRegistry(BreakerConfig(consecutive_failures=2, open_duration_s=5),
                               on_state_change=lambda b, _o, new: metrics.set_breaker(b, new),
                               clock=lambda: clock[0])
    for _ in range(2):
        breakers.record_failure("b1")
    assert gauge_value(metrics, "b1") == BreakerState.OPEN.code
    clock[0] = 10.0
    assert breakers.get("b1").state == BreakerState.HALF_OPEN
    assert gauge_value(metrics, "b1") == BreakerState.HALF_OPEN.code
    alert = next(r for r in rules() if r.get("alert") == "InferplaneCircuitBreakerOpen")
    assert alert["expr"].rstrip().endswith(f"== {BreakerState.OPEN.code}")


def test_dashboard_panel_uses_the_same_scale():
    board = json.loads((DASHBOARD_DIR / "gateway-overview.json").read_text())
    panel = next(p for p in board["panels"] if p.get("title") == "Circuit breaker state")
    assert panel["description"].startswith(BreakerState.legend())
    assert panel["fieldConfig"]["defaults"]["max"] == BreakerState.OPEN.code
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["color"] for s in steps][-1] == "red"
    assert steps[-1]["value"] == BreakerState.OPEN.code


def _series_values(expanding: str) -> list[float]:
    """promtool's input notation: "2x2 1 0x20" -> [2, 1, 0], the value each run starts at."""
    return [float(re.match(r"-?[0-9.]+", token).group()) for token in expanding.split()]


def test_alert_unit_tests_feed_the_gauge_only_breaker_codes():
    tests = yaml.safe_load((ROOT / "alerts" / "tests" / "gateway.test.yml").read_text())
    codes = {s.code for s in BreakerState}
    fed = []
    for case in tests["tests"]:
        for series in case.get("input_series", []):
            if series["series"].startswith(Metric.CIRCUIT_BREAKER_STATE):
                fed.append((case["name"], _series_values(series["values"])))
    assert fed, f"no unit test feeds {Metric.CIRCUIT_BREAKER_STATE}"
    for name, values in fed:
        assert set(values) <= codes, (name, values)
    firing = [values for name, values in fed if "stays open" in name]
    assert firing and set(firing[0]) == {BreakerState.OPEN.code}

"""One vocabulary of breaker states: the gauge a real breaker sets, the alert's threshold and
the dashboard's scale all read BreakerState."""
from __future__ import annotations

import json

from gateway.breaker import BreakerConfig, BreakerRegistry, BreakerState
from gateway.metrics import GatewayMetrics
from tests.observability.metric_names import DASHBOARD_DIR, rules


def gauge_value(metrics: GatewayMetrics, backend: str) -> float:
    return metrics.registry.get_sample_value("inferplane_circuit_breaker_state",
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

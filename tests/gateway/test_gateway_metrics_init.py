"""GatewayMetrics.follow: every known series exists at zero for the snapshot's models,
versions, backends and teams, re-initialised when the snapshot version moves."""
from __future__ import annotations

from types import SimpleNamespace

from common.metric_names import Metric
from gateway.observability.metrics import REJECTION_REASONS, STATUS_CODES, GatewayMetrics
from gateway.traffic.breaker import BreakerState


def snapshot(version: int, backends: list[tuple[str, str | None]]):
    views = tuple(SimpleNamespace(id=b, version=v) for b, v in backends)
    model = SimpleNamespace(name="m", backends=views, splits=())
    return SimpleNamespace(version=version, models={"m": model}, teams={"blue": object()})


def test_follow_initialises_each_snapshot_once_and_keeps_existing_values():
    metrics = GatewayMetrics()
    get = metrics.registry.get_sample_value
    metrics.follow(snapshot(1, [("b1", "v1")]), lambda model: "round_robin")
    for code in STATUS_CODES:
        for version in ("v1", "none"):
            assert get(Metric.REQUESTS.total,
                       {"model": "m", "version": version, "code": code}) == 0
    for reason in REJECTION_REASONS:
        assert get(Metric.REJECTIONS.total, {"model": "m", "reason": reason}) == 0
    assert get(Metric.SPEND_USD.total, {"model": "m", "team": "blue"}) == 0
    assert get(Metric.ROUTING_DECISIONS.total,
               {"model": "m", "strategy": "round_robin", "backend": "b1"}) == 0
    assert get(Metric.CIRCUIT_BREAKER_STATE, {"backend": "b1"}) == BreakerState.CLOSED.code
    metrics.set_breaker("b1", BreakerState.OPEN)
    metrics.follow(snapshot(2, [("b1", "v1"), ("b2", None)]), lambda model: "round_robin")
    assert get(Metric.CIRCUIT_BREAKER_STATE, {"backend": "b1"}) == BreakerState.OPEN.code
    assert get(Metric.INFLIGHT_REQUESTS, {"model": "m", "backend": "b2"}) == 0
    assert get(Metric.UPSTREAM_ERRORS.total,
               {"model": "m", "backend": "b2", "kind": "connect"}) == 0

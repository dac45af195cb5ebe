"""GatewayMetrics.follow: every known series exists at zero for the snapshot's models,
versions, backends and teams, re-initialised when the snapshot version moves."""
from __future__ import annotations

from types import SimpleNamespace

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
            assert get("inferplane_requests_total",
                       {"model": "m", "version": version, "code": code}) == 0
    for reason in REJECTION_REASONS:
        assert get("inferplane_rejections_total", {"model": "m", "reason": reason}) == 0
    assert get("inferplane_spend_usd_total", {"model": "m", "team": "blue"}) == 0
    assert get("inferplane_routing_decisions_total",
               {"model": "m", "strategy": "round_robin", "backend": "b1"}) == 0
    assert get("inferplane_circuit_breaker_state", {"backend": "b1"}) == BreakerState.CLOSED.code
    metrics.set_breaker("b1", BreakerState.OPEN)
    metrics.follow(snapshot(2, [("b1", "v1"), ("b2", None)]), lambda model: "round_robin")
    assert get("inferplane_circuit_breaker_state", {"backend": "b1"}) == BreakerState.OPEN.code
    assert get("inferplane_inflight_requests", {"model": "m", "backend": "b2"}) == 0
    assert get("inferplane_upstream_errors_total",
               {"model": "m", "backend": "b2", "kind": "connect"}) == 0

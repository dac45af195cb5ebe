"""A mirrored candidate (shadow, blue/green's gate) is measured on the shadow copies the
gateway records, read through the real GatewayMetrics registry; client totals ignore them."""
from __future__ import annotations

from control_plane.rollouts.analysis import measure
from control_plane.rollouts.metrics_source import RegistryMetricsSource
from control_plane.rollouts.spec import Analysis
from gateway.observability.metrics import GatewayMetrics
from gateway.traffic.splits import ShadowRecord

SPEC = Analysis(interval_s=1, min_requests=10, max_error_rate=0.1,
                max_p95_latency_ratio=3.0)


def client_requests(metrics: GatewayMetrics, version: str, n: int) -> None:
    for _ in range(n):
        metrics.requests.labels("chat", version, "200").inc()
        metrics.request_duration.labels("chat", version).observe(0.1)


def shadow_copies(metrics: GatewayMetrics, n: int, outcome: str, latency_s: float = 0.1):
    for _ in range(n):
        metrics.shadow_record(ShadowRecord("chat", "v2", latency_s, 10, 0.1, 10, 1.0,
                                           None if outcome == "ok" else "boom", outcome))


async def interval(metrics: GatewayMetrics, fill) -> tuple:
    source = RegistryMetricsSource(metrics.registry)
    before = await source.scrape()
    fill(metrics)
    delta = (await source.scrape()).since(before)
    return delta, measure(delta, "chat", "v1", "v2", SPEC, 1.0, mirrored=True)


async def test_failing_shadow_copies_fail_the_candidate_and_stay_out_of_client_totals():
    def fill(m):
        client_requests(m, "v1", 30)
        shadow_copies(m, 7, "ok")
        shadow_copies(m, 2, "error")
        shadow_copies(m, 1, "timeout")
        shadow_copies(m, 50, "dropped")     # never reached the candidate
        m.shadow_requests.labels("chat", "v2", "no_backend").inc(50)
    delta, result = await interval(GatewayMetrics(), fill)
    assert result.verdict == "fail" and result.candidate_requests == 10
    error_rate = next(c for c in result.checks if c.name == "error_rate")
    assert error_rate.candidate == 0.3 and error_rate.stable == 0.0
    assert delta.model_total("chat").requests == 30  # what clients saw, for SLOs


async def test_slow_shadow_copies_fail_the_latency_check():
    def fill(m):
        client_requests(m, "v1", 20)
        shadow_copies(m, 20, "ok", latency_s=2.0)
    _, result = await interval(GatewayMetrics(), fill)
    assert result.verdict == "fail" and "p95_latency_s" in result.message


async def test_healthy_shadow_copies_pass_and_too_few_are_inconclusive():
    _, healthy = await interval(GatewayMetrics(), lambda m: (client_requests(m, "v1", 20),
                                                           shadow_copies(m, 12, "ok")))
    assert healthy.verdict == "pass" and healthy.candidate_requests == 12
    _, scarce = await interval(GatewayMetrics(), lambda m: (client_requests(m, "v1", 20),
                                                          shadow_copies(m, 3, "ok")))
    assert scarce.verdict == "inconclusive"
    assert "'v2' answered (shadow copies included) 3 requests" in scarce.message

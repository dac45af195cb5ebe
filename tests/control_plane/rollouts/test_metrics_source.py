"""Scraping and reducing the gateway's metrics: real prometheus-client text, real HTTP."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from control_plane.rollouts.metrics_source import (Histogram, MetricsSource, MetricsUnavailable,
                                                    RegistryMetricsSource, parse_metrics)
from gateway.observability.metrics import GatewayMetrics
from tests.conftest import free_port
from tests.control_plane.rollouts.conftest import Traffic


def scrape_of(traffic: Traffic):
    return parse_metrics(generate_latest(traffic.metrics.registry).decode(), taken_at=0.0)


def test_parse_counts_requests_5xx_and_histograms_per_version():
    traffic = Traffic()
    traffic.send("v1", 7, latency_s=0.2, ttft_s=0.04)
    traffic.send("v1", 3, code="502", latency_s=0.2)
    traffic.send("v1", 2, code="429", latency_s=0.2)  # a refusal is not a server error
    traffic.send("v2", 1, model="other")
    v1 = scrape_of(traffic).get("chat", "v1")
    assert (v1.requests, v1.errors) == (12, 3)
    assert v1.duration.count == 12 and v1.duration.buckets[0.25] == 12
    assert v1.duration.buckets[0.1] == 0 and v1.ttft.count == 7
    assert scrape_of(traffic).get("other", "v2").requests == 1
    assert scrape_of(traffic).get("chat", "v9").requests == 0


async def test_the_registry_read_in_process_equals_the_parsed_text():
    traffic = Traffic()
    traffic.send("v1", 7, latency_s=0.2, ttft_s=0.04)
    traffic.send("v2", 3, code="503", latency_s=1.5)
    traffic.metrics.tokens.labels("chat", "v1", "prompt").inc(99)  # not an analysed family
    traffic.metrics.tpot.labels("chat", "v1").observe(0.01)
    direct = await RegistryMetricsSource(traffic.metrics.registry).scrape()
    parsed = scrape_of(traffic)
    assert direct.series == parsed.series and direct.shadow == parsed.shadow
    v2 = direct.get("chat", "v2")
    assert (v2.requests, v2.errors, v2.duration.count, v2.duration.buckets[2.5]) == (3, 3, 3, 3)


def test_deltas_cover_one_interval_and_survive_a_gateway_restart():
    traffic = Traffic()
    traffic.send("v1", 10, code="500")
    first = scrape_of(traffic)
    traffic.send("v1", 4)
    delta = scrape_of(traffic).since(first).get("chat", "v1")
    assert (delta.requests, delta.errors, delta.duration.count) == (4, 0, 4)

    restarted = Traffic()  # counters back at zero, then 2 new requests
    restarted.send("v1", 2)
    delta = scrape_of(restarted).since(first).get("chat", "v1")
    assert (delta.requests, delta.duration.count) == (2, 2)


def test_p95_interpolates_like_histogram_quantile():
    h = Histogram({0.1: 50, 0.2: 90, 0.4: 100, float("inf"): 100}, count=100)
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.95) == pytest.approx(0.3)  # halfway through the 0.2–0.4 bucket
    assert Histogram().quantile(0.95) is None
    tail = Histogram({0.1: 1, float("inf"): 100}, count=100)
    assert tail.quantile(0.95) == 0.1  # beyond the last finite bound: that bound
    assert h.count_at_most(0.3) == pytest.approx(95)


async def test_scrapes_several_gateways_over_http_and_sums_them():
    servers = []
    registries = [CollectorRegistry(), CollectorRegistry()]
    for registry, n in zip(registries, (5, 8)):
        GatewayMetrics(registry).requests.labels("chat", "v2", "200").inc(n)
        port = free_port()
        servers.append(start_http_server(port, addr="127.0.0.1", registry=registry))
        servers[-1] = (servers[-1], port)
    try:
        urls = [f"http://127.0.0.1:{port}/metrics" for _, port in servers]
        source = MetricsSource(urls)
        scrape = await source.scrape()
        assert scrape.get("chat", "v2").requests == 13
        client = source._client
        assert (await source.scrape()).get("chat", "v2").requests == 13
        assert source._client is client and not client.is_closed   # one client, every tick

        dead = f"http://127.0.0.1:{free_port()}/metrics"
        with pytest.raises(MetricsUnavailable, match="scraping http://127.0.0.1"):
            await MetricsSource(urls + [dead], timeout_s=2).scrape()
    finally:
        for (server, _thread), _ in servers:
            server.shutdown()

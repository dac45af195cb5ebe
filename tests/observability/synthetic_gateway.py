"""Serve /metrics with the gateway and control-plane metric names under steady synthetic load.

    python -m tests.observability.synthetic_gateway --port 9400

Lets the Prometheus end-to-end test exercise recording rules and dashboard
queries without a model; every family the dashboards read gets samples.
"""
from __future__ import annotations

import argparse
import random
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from common.metric_names import Metric
from gateway.observability.metrics import CACHE_RESULTS

MODELS = ("smollm2", "llama")
VERSIONS = ("v1", "v2")
BACKENDS = ("b1", "b2")


def build_metrics(registry: CollectorRegistry) -> dict:
    def counter(name, labels):
        return Counter(name, name, labels, registry=registry)

    def gauge(name, labels):
        return Gauge(name, name, labels, registry=registry)

    def histogram(name, labels, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)):
        return Histogram(name, name, labels, buckets=buckets, registry=registry)

    mv = ["model", "version"]
    return {
        "requests": counter(Metric.REQUESTS, [*mv, "code"]),
        "duration": histogram(Metric.REQUEST_DURATION, mv),
        "ttft": histogram(Metric.TIME_TO_FIRST_TOKEN, mv),
        "tpot": histogram(Metric.TIME_PER_OUTPUT_TOKEN, mv),
        "itl": histogram(Metric.INTER_TOKEN_LATENCY, ["model"]),
        "tokens": counter(Metric.TOKENS, [*mv, "kind"]),
        "queue_depth": gauge(Metric.QUEUE_DEPTH, ["model", "priority"]),
        "queue_wait": histogram(Metric.QUEUE_WAIT, ["model", "priority"]),
        "rejections": counter(Metric.REJECTIONS, ["model", "reason"]),
        "breaker": gauge(Metric.CIRCUIT_BREAKER_STATE, ["backend"]),
        "routing": counter(Metric.ROUTING_DECISIONS, ["model", "strategy", "backend"]),
        "hit_estimate": gauge(Metric.PREFIX_CACHE_HIT_ESTIMATE, ["model", "backend"]),
        "lookup_tokens": counter(Metric.PREFIX_LOOKUP_TOKENS, ["model"]),
        "hit_tokens": counter(Metric.PREFIX_HIT_TOKENS, ["model"]),
        "upstream_errors": counter(Metric.UPSTREAM_ERRORS, ["model", "backend", "kind"]),
        "spend": counter(Metric.SPEND_USD, ["model", "team"]),
        "healthy": gauge(Metric.BACKEND_HEALTHY, ["model", "backend"]),
        "retries": counter(Metric.RETRIES, ["model"]),
        "fallbacks": counter(Metric.FALLBACKS, ["model"]),
        "resumes": counter(Metric.STREAM_RESUMES, ["model", "kind"]),
        "inflight": gauge(Metric.INFLIGHT_REQUESTS, ["model", "backend"]),
        "shadow": counter(Metric.SHADOW_REQUESTS, [*mv, "outcome"]),
        "similarity": histogram(Metric.SHADOW_SIMILARITY, ["model"],
                                buckets=(0.5, 0.8, 0.9, 0.95, 0.99, 1.0)),
        "rollout_state": gauge(Metric.ROLLOUT_STATE, ["model", "rollout"]),
        "rollout_step": gauge(Metric.ROLLOUT_STEP_STARTED,
                              ["model", "rollout"]),
        "budget": gauge(Metric.SLO_ERROR_BUDGET_REMAINING, ["model", "slo"]),
        "cache": counter(Metric.CACHE_REQUESTS, ["model", "result"]),
        "cache_lookup": histogram(Metric.CACHE_LOOKUP_DURATION, ["kind"],
                                  buckets=(0.0005, 0.001, 0.005, 0.025, 0.1)),
        "cache_entries": gauge(Metric.CACHE_ENTRIES, ["kind"]),
        "guardrail": counter(Metric.GUARDRAIL_ACTIONS, ["model", "rule", "action", "direction"]),
    }


def one_request(m: dict, rng: random.Random) -> None:
    model, version, backend = rng.choice(MODELS), rng.choice(VERSIONS), rng.choice(BACKENDS)
    code = "503" if rng.random() < 0.02 else "200"
    m["requests"].labels(model, version, code).inc()
    m["duration"].labels(model, version).observe(rng.uniform(0.2, 3.0))
    m["ttft"].labels(model, version).observe(rng.uniform(0.05, 1.0))
    m["tpot"].labels(model, version).observe(rng.uniform(0.01, 0.08))
    m["itl"].labels(model).observe(rng.uniform(0.01, 0.08))
    m["tokens"].labels(model, version, "prompt").inc(rng.randint(20, 400))
    m["tokens"].labels(model, version, "completion").inc(rng.randint(5, 200))
    m["queue_wait"].labels(model, "normal").observe(rng.uniform(0.0, 0.3))
    m["routing"].labels(model, "prefix_aware", backend).inc()
    m["lookup_tokens"].labels(model).inc(100)
    m["hit_tokens"].labels(model).inc(rng.randint(0, 100))
    m["spend"].labels(model, "search").inc(0.0004)
    m["shadow"].labels(model, "v2", "ok").inc()
    m["similarity"].labels(model).observe(rng.uniform(0.85, 1.0))
    m["cache"].labels(model, rng.choice(CACHE_RESULTS)).inc()
    m["cache_lookup"].labels(rng.choice(("exact", "semantic"))).observe(rng.uniform(0.0, 0.05))
    if rng.random() < 0.1:
        m["guardrail"].labels(model, "email", "mask", "input").inc()
    if code != "200":
        m["upstream_errors"].labels(model, backend, "http_5xx").inc()
        m["retries"].labels(model).inc()
        m["fallbacks"].labels(model).inc()
        m["resumes"].labels(model, "protocol").inc()
    if rng.random() < 0.05:
        m["rejections"].labels(model, "rpm").inc()


def set_gauges(m: dict, rng: random.Random, started: float) -> None:
    for model in MODELS:
        m["queue_depth"].labels(model, "normal").set(rng.randint(0, 5))
        m["rollout_state"].labels(model, f"{model}-canary").set(1)
        m["rollout_step"].labels(model, f"{model}-canary").set(started)
        m["budget"].labels(model, "availability").set(0.8)
        for backend in BACKENDS:
            m["healthy"].labels(model, backend).set(1)
            m["inflight"].labels(model, backend).set(rng.randint(0, 8))
            m["hit_estimate"].labels(model, backend).set(rng.uniform(0.2, 0.7))
    for kind in ("exact", "semantic"):
        m["cache_entries"].labels(kind).set(rng.randint(0, 100))
    for backend in BACKENDS:
        m["breaker"].labels(backend).set(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rps", type=float, default=50.0)
    args = parser.parse_args()
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    rng, started = random.Random(7), time.time()
    start_http_server(args.port, addr="127.0.0.1", registry=registry)
    while True:
        for _ in range(max(1, int(args.rps / 10))):
            one_request(metrics, rng)
        set_gauges(metrics, rng, started)
        time.sleep(0.1)


if __name__ == "__main__":
    main()

"""The metric-name extractor and the check that dashboards and rules use exported names."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from builtin_engine.core.metrics import EngineMetrics
from gateway.observability.metrics import GatewayMetrics
from tests.observability import metric_names as mn


def test_extracts_names_and_ignores_functions_keywords_and_labels():
    expr = ('histogram_quantile(0.95, sum by (le, model) (rate(inferplane_ttft_bucket'
            '{job=~"$job", model=~"$model"}[$__rate_interval]))) > on (model) group_left '
            'max without (instance) (vllm:kv_cache_usage_perc offset 5m) * 1e3')
    assert mn.metric_names_in(expr) == {"inferplane_ttft_bucket", "vllm:kv_cache_usage_perc"}


def test_strings_and_label_values_arguments_are_not_metrics():
    assert mn.metric_names_in('label_values(inferplane_requests_total{job=~"$job"}, model)') == {
        "inferplane_requests_total"}
    expr = 'label_replace(up{job="x"}, "dst", "$1", "instance", "(.*):.*") and time() > 3'
    assert mn.metric_names_in(expr) == {"up"}


def test_aggregation_without_space_before_parenthesis():
    assert mn.metric_names_in("sum(rate(a_total[1m])) / count(b)") == {"a_total", "b"}


def test_dashboards_and_rules_only_reference_documented_metrics():
    referenced = mn.referenced_metrics()
    assert "inferplane_requests_total" in referenced
    assert "vllm:kv_cache_usage_perc" in referenced
    assert not any(name.startswith("inferplane:") for name in referenced), "recording rules leak"
    assert mn.missing_metrics() == set()


def test_every_documented_metric_is_shown_or_alerted_on():
    referenced = mn.referenced_metrics()
    unused = {name for name in mn.DOCUMENTED_METRICS
              if not any(mn.is_exported(ref, {name}) for ref in referenced)}
    assert unused == set()


def test_missing_names_are_reported():
    exported = set(mn.DOCUMENTED_METRICS) - {"inferplane_queue_depth", "vllm:num_preemptions_total"}
    assert mn.missing_metrics(exported) == {"inferplane_queue_depth",
                                            "vllm:num_preemptions_total"}


def test_names_from_a_live_exposition_match_histogram_samples():
    registry = CollectorRegistry()
    Counter("inferplane_requests", "requests", ["code"], registry=registry).labels("200").inc()
    Histogram("inferplane_request_duration_seconds", "latency", registry=registry).observe(0.2)
    names = mn.names_from_exposition(generate_latest(registry).decode())
    assert "inferplane_requests_total" in names
    assert mn.is_exported("inferplane_request_duration_seconds_bucket", names)
    assert not mn.is_exported("inferplane_queue_depth", names)


def test_a_labelled_family_without_samples_still_counts():
    registry = CollectorRegistry()
    Counter("inferplane_retries", "retries", ["model"], registry=registry)
    assert "inferplane_retries_total" in mn.names_from_exposition(generate_latest(registry).decode())


def test_gateway_and_engine_registries_export_what_dashboards_and_rules_read():
    gateway = mn.names_from_exposition(generate_latest(GatewayMetrics().registry).decode())
    engine = mn.names_from_exposition(EngineMetrics("smollm2", {"block_size": "16"})
                                      .exposition().decode())
    assert mn.missing_metrics(gateway | engine | mn.CONTROL_PLANE_METRICS) == set()

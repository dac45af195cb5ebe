"""The response cache's metric families, declared with the gateway's others
(gateway/observability/metrics.py; names in common.metric_names.Metric).

    m = CacheMetrics(gateway_metrics)
    m.requests.labels(model, "hit").inc()          # hit | semantic_hit | miss | bypass
    m.lookup.labels("exact").observe(seconds)      # exact | semantic (the embedding included)
    m.entries.labels("exact").set(n)
"""
from __future__ import annotations


class CacheMetrics:
    __slots__ = ("entries", "lookup", "requests")

    def __init__(self, gateway_metrics):
        self.requests = gateway_metrics.cache_requests
        self.entries = gateway_metrics.cache_entries
        self.lookup = gateway_metrics.cache_lookup

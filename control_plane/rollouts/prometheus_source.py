"""Rollout analysis from Prometheus: the gateways' per-version metrics read through PromQL, as
Flagger's MetricTemplates and Argo Rollouts' AnalysisTemplates do, so replicas behind a
Kubernetes Service (no stable per-replica URL) are analysed as one.

    source = PrometheusMetricsSource(PrometheusAnalysis(url="http://prometheus:9090",
                                                        selector='namespace="llm"'))
    scrape = await source.scrape()     # a PromScrape: the models seen, and the time
    delta = scrape.since(earlier)      # PromQL over [earlier.taken_at, scrape.taken_at]

A measurement's interval is one PromQL range ending at the later scrape's time:
`increase(...[<seconds>s])` per family, summed over every replica. Prometheus corrects
counter resets per series (a restarted replica), which a sum of direct scrapes cannot. The
queries are templates (`{{ window }}`, `{{ selector }}`) an operator may replace per family
(relabelled metric names, recording rules), each returning the labels the default returns.

A query that fails (Prometheus down, a bad template) raises MetricsUnavailable: the
controller records an inconclusive measurement, never a pass (docs/rollouts.md).
"""

from __future__ import annotations

import asyncio
import math
import time

import httpx

from control_plane.rollouts.metrics_source import (
    DURATION, REQUESTS, SHADOW_DURATION, SHADOW_REQUESTS, SHADOW_TTFT, TTFT, MetricsUnavailable,
    Scrape, _absorb)
from control_plane.settings import PrometheusAnalysis

SELECTOR, WINDOW = "{{ selector }}", "{{ window }}"   # the templates' holes


def _increase(sample: str, by: str) -> str:
    return f"sum by ({by}) (increase({sample}{{{SELECTOR}}}[{WINDOW}]))"


# family → (the sample name its rows are read as, the default PromQL)
QUERIES: dict[str, tuple[str, str]] = {
    "requests": (REQUESTS, _increase(REQUESTS, "model, version, code")),
    "shadow_requests": (SHADOW_REQUESTS, _increase(SHADOW_REQUESTS, "model, version, outcome")),
    **{family: (name + "_bucket", _increase(name + "_bucket", "model, version, le"))
       for family, name in (("duration", DURATION), ("ttft", TTFT),
                            ("shadow_duration", SHADOW_DURATION), ("shadow_ttft", SHADOW_TTFT))},
}
# What `scrape()` asks each tick: the models and versions with traffic so far (the SLO
# tracker's model list) and, on the way, whether Prometheus answers at all.
SEEN = f"sum by (model, version, code) ({REQUESTS}{{{SELECTOR}}})"


def render(template: str, window_s: float | None, selector: str) -> str:
    """A query template with its holes filled (`{{ window }}` as whole seconds, ≥ 1 s)."""
    query = template.replace(SELECTOR, selector)
    if window_s is not None:
        query = query.replace(WINDOW, f"{max(1, math.ceil(window_s))}s")
    return query


class PromQL:
    """Instant queries against one Prometheus (synchronous: the controller advances rollouts
    in a worker thread, and the SLO tracker evaluates there too)."""

    def __init__(self, settings: PrometheusAnalysis):
        self.settings = settings
        self._client = httpx.Client(base_url=settings.url.rstrip("/"),
                                    timeout=settings.timeout_s, trust_env=False)

    def vector(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        """(labels, value) per series of an instant vector evaluated at `at` (unix seconds)."""
        try:
            response = self._client.get("/api/v1/query", params={"query": query, "time": at})
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise MetricsUnavailable(f"Prometheus query failed: {exc!r}") from exc
        if not isinstance(body, dict) or response.status_code != 200 \
                or body.get("status") != "success":
            error = body.get("error", "") if isinstance(body, dict) else str(body)[:200]
            raise MetricsUnavailable(f"Prometheus refused {query!r}: {response.status_code} "
                                     f"{error}")
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise MetricsUnavailable(f"{query!r} gave a {data.get('resultType')}, not a vector")
        return [(row["metric"], float(row["value"][1])) for row in data["result"]]

    def close(self) -> None:
        self._client.close()


class PromScrape(Scrape):
    """A point in time whose deltas are PromQL ranges; `series` holds the cumulative request
    counts seen at that time (which models and versions exist), not histograms."""

    def __init__(self, taken_at: float, promql: PromQL):
        super().__init__(taken_at)
        self.promql = promql

    def since(self, earlier: Scrape) -> Scrape:
        return self.over(self.taken_at - earlier.taken_at)

    def window(self, baseline: Scrape | None, window_s: float) -> Scrape:
        return self.over(window_s)   # Prometheus keeps the history: no baseline needed

    def over(self, window_s: float) -> Scrape:
        """The traffic of the `window_s` seconds before this scrape, every family."""
        settings = self.promql.settings
        delta = Scrape(self.taken_at)
        for family, (sample, default) in QUERIES.items():
            query = render(settings.queries.get(family, default), window_s, settings.selector)
            for labels, value in self.promql.vector(query, self.taken_at):
                if not math.isnan(value):
                    _absorb(delta, sample, labels, value)
        for counts in (*delta.series.values(), *delta.shadow.values()):
            for histogram in (counts.duration, counts.ttft):
                histogram.count = histogram.buckets.get(math.inf, histogram.count)
        return delta


class PrometheusMetricsSource:
    """`analysis.source: prometheus` (control_plane.settings.RolloutAnalysisSettings)."""

    def __init__(self, settings: PrometheusAnalysis, clock=time.time):
        self.promql = PromQL(settings)
        self._clock = clock

    async def scrape(self) -> PromScrape:
        return await asyncio.to_thread(self._scrape)

    def _scrape(self) -> PromScrape:
        # Evaluated a little in the past: the newest samples of a scrape Prometheus is still
        # ingesting would be missing from the range that ends here.
        scrape = PromScrape(self._clock() - self.promql.settings.lag_s, self.promql)
        query = render(SEEN, None, self.promql.settings.selector)
        for labels, value in self.promql.vector(query, scrape.taken_at):
            _absorb(scrape, REQUESTS, labels, value)
        return scrape


__all__ = ["QUERIES", "PromQL", "PromScrape", "PrometheusMetricsSource", "render"]

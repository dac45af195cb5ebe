"""The gateway's Prometheus metrics, in their own registry (served at /metrics).

Labels are bounded: model, version, backend, team, strategy, reason — never key or user ids.
Every labelled family gets its known series (at zero) for each snapshot's models, versions,
backends and teams and for the vocabularies below, so that `rate()`-based alerts and panels
see a 0 rather than nothing before the first event:

    metrics = GatewayMetrics()
    metrics.follow(snapshot, strategy_of)   # on scrape: re-initialises when the version moved

Worker processes (common.workers) share one set of values: the supervisor sets
PROMETHEUS_MULTIPROC_DIR, each worker's families write to files there, and `registry` then
holds a MultiProcessCollector that sums them, so one scrape of any worker shows the whole
gateway. Gauges say how their per-worker values combine (`multiprocess_mode`, ignored in one
process): in-flight and queue depths add up, states take the worst live worker's value.
Without the variable the families live in `registry` as usual.
"""
from __future__ import annotations

import os
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.multiprocess import MultiProcessCollector

from common.error_codes import UpstreamErrorKind
from common.metric_names import NO_TEAM, NO_VERSION, Metric
from common.vocabulary import BreakerState, Priority  # BreakerState codes: defined next to the enum
from common.workers import MULTIPROC_ENV
from gateway.observability.loop_monitor import LoopMonitor

# 5 ms .. 120 s: from a cached short completion to a long generation.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
                   60.0, 120.0)
TOKEN_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2,
                         0.3, 0.5, 1.0, 2.5)
SIMILARITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
LENGTH_RATIO_BUCKETS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
# 0.1 ms .. 2.5 s: an in-memory exact lookup to a semantic one waiting on its embedding.
CACHE_LOOKUP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                        0.1, 0.25, 0.5, 1.0, 2.5)

# Label vocabularies initialised at start-up (values outside them still work: their series
# then appear on first use). Status codes: what the gateway answers, 499 = client went away.
STATUS_CODES = ("200", "400", "401", "403", "404", "413", "429", "499", "500", "502", "503",
                "504")
TOKEN_KINDS = ("prompt", "completion")
REJECTION_REASONS = ("rate_limit", "too_large", "budget", "unavailable", "queue_full",
                     "queue_timeout", "no_backend", "cold_start_timeout")
SHADOW_OUTCOMES = ("ok", "error", "timeout", "dropped")
CACHE_RESULTS = ("hit", "semantic_hit", "miss", "bypass")   # of a response cache lookup


def multiprocess_dir() -> str | None:
    """The shared metrics directory of worker processes, None in a single-process gateway."""
    return os.environ.get(MULTIPROC_ENV) or None


# Distinct (model, version) and (model, backend) series kept labelled; past it the caches
# start over (labels are bounded, so only a long-lived gateway with churning models gets there).
SERIES_CACHE_SIZE = 4096


class ChildCache:
    """`family.labels(*values)` looked up once per label tuple (`.labels()` hashes, locks
    and, in workers, names a file key on every call):

        inflight_of = ChildCache(metrics.inflight); inflight_of("m", "b1").inc()
    """
    __slots__ = ("_family", "_children")

    def __init__(self, family):
        self._family = family
        self._children: dict[tuple[str, ...], object] = {}

    def __call__(self, *values: str):
        child = self._children.get(values)
        if child is None:
            if len(self._children) >= SERIES_CACHE_SIZE:
                self._children.clear()
            child = self._children[values] = self._family.labels(*values)
        return child


class RequestSeries:
    """The labelled children one finished request of (model, version) writes, looked up once:
    `.labels()` hashes and locks on every call, and the account stage would call it six times.

        series = metrics.series(model, version)
        series.code(200).inc(); series.duration.observe(seconds)
    """
    __slots__ = ("_requests", "_labels", "_codes", "duration", "ttft", "tpot", "prompt",
                 "completion")

    def __init__(self, m: "GatewayMetrics", model: str, version: str):
        self._requests, self._labels = m.requests, (model, version)
        self._codes: dict[int, object] = {}
        self.duration = m.request_duration.labels(model, version)
        self.ttft = m.ttft.labels(model, version)
        self.tpot = m.tpot.labels(model, version)
        self.prompt = m.tokens.labels(model, version, "prompt")
        self.completion = m.tokens.labels(model, version, "completion")

    def code(self, code: int):
        child = self._codes.get(code)
        if child is None:
            child = self._codes[code] = self._requests.labels(*self._labels, str(code))
        return child


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self._series: dict[tuple[str, str], RequestSeries] = {}
        r = self._families_registry()
        self.requests = Counter(Metric.REQUESTS.total, "Requests by final status code",
                                ["model", "version", "code"], registry=r)
        self.request_duration = Histogram(
            Metric.REQUEST_DURATION, "End-to-end request latency",
            ["model", "version"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(Metric.TIME_TO_FIRST_TOKEN, "Time to first token",
                              ["model", "version"], buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram(Metric.TIME_PER_OUTPUT_TOKEN,
                              "Mean time per output token after the first", ["model", "version"],
                              buckets=TOKEN_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram(Metric.INTER_TOKEN_LATENCY,
                             "Gap between streamed chunks", ["model"],
                             buckets=TOKEN_LATENCY_BUCKETS, registry=r)
        self.tokens = Counter(Metric.TOKENS.total, "Tokens by kind",
                              ["model", "version", "kind"], registry=r)
        self.queue_depth = Gauge(Metric.QUEUE_DEPTH, "Requests waiting for admission",
                                 ["model", "priority"], registry=r,
                                 multiprocess_mode="livesum")
        self.queue_wait = Histogram(Metric.QUEUE_WAIT, "Time spent in admission",
                                    ["model", "priority"], buckets=LATENCY_BUCKETS, registry=r)
        self.rejections = Counter(Metric.REJECTIONS.total, "Requests refused before routing",
                                  ["model", "reason"], registry=r)
        self.breaker_state = Gauge(Metric.CIRCUIT_BREAKER_STATE, BreakerState.legend(),
                                   ["backend"], registry=r,
                                   multiprocess_mode="livemax")   # codes grow with severity
        self.routing_decisions = Counter(Metric.ROUTING_DECISIONS.total, "Backend picks",
                                         ["model", "strategy", "backend"], registry=r)
        self.prefix_hit_estimate = Gauge(Metric.PREFIX_CACHE_HIT_ESTIMATE,
                                         "Estimated prefix-cache hit ratio", ["model", "backend"],
                                         registry=r, multiprocess_mode="livemostrecent")
        self.prefix_lookup_tokens = Counter(Metric.PREFIX_LOOKUP_TOKENS,
                                            "Prompt tokens looked up in the prefix index",
                                            ["model"], registry=r)
        self.prefix_hit_tokens = Counter(Metric.PREFIX_HIT_TOKENS,
                                         "Prompt tokens found in the chosen backend's prefix index",
                                         ["model"], registry=r)
        self.upstream_errors = Counter(Metric.UPSTREAM_ERRORS.total, "Engine failures",
                                       ["model", "backend", "kind"], registry=r)
        self.spend = Counter(Metric.SPEND_USD, "Spend in USD", ["model", "team"], registry=r)
        self.stream_resumes = Counter(Metric.STREAM_RESUMES.total,
                                      "Streams continued on another backend mid-way",
                                      ["model", "kind"], registry=r)
        self.retries = Counter(Metric.RETRIES.total, "Retries on another backend",
                               ["model"], registry=r)
        self.fallbacks = Counter(Metric.FALLBACKS.total, "Requests served by a fallback",
                                 ["model"], registry=r)
        self.guardrail_actions = Counter(Metric.GUARDRAIL_ACTIONS.total,
                                         "Guardrail rule matches by the action taken",
                                         ["model", "rule", "action", "direction"], registry=r)
        self.inflight = Gauge(Metric.INFLIGHT_REQUESTS, "Requests in flight",
                              ["model", "backend"], registry=r,
                              multiprocess_mode="livesum")
        self.shadow_requests = Counter(Metric.SHADOW_REQUESTS.total, "Shadow copies sent",
                                       ["model", "version", "outcome"], registry=r)
        self.shadow_similarity = Histogram(Metric.SHADOW_SIMILARITY,
                                           "Similarity of shadow and primary answers", ["model"],
                                           buckets=SIMILARITY_BUCKETS, registry=r)
        # The shadow side's own latency families: separate from the client-facing ones so that
        # request totals, SLOs and alerts only ever count what clients received.
        self.shadow_duration = Histogram(
            Metric.SHADOW_REQUEST_DURATION, "Shadow copy end-to-end latency",
            ["model", "version"], buckets=LATENCY_BUCKETS, registry=r)
        self.shadow_ttft = Histogram(
            Metric.SHADOW_TIME_TO_FIRST_TOKEN, "Shadow copy time to first token",
            ["model", "version"], buckets=LATENCY_BUCKETS, registry=r)
        self.shadow_length_ratio = Histogram(
            Metric.SHADOW_LENGTH_RATIO, "Shadow answer length / primary answer length",
            ["model"], buckets=LENGTH_RATIO_BUCKETS, registry=r)
        # The response cache (gateway/cache): lookups by result (hit | semantic_hit | miss |
        # bypass), answers held (exact | semantic; each process's own, summed over workers),
        # lookup latency (exact: memory or Redis; semantic: with its embedding call).
        self.cache_requests = Counter(Metric.CACHE_REQUESTS.total,
                                      "Response cache lookups by result", ["model", "result"],
                                      registry=r)
        self.cache_entries = Gauge(Metric.CACHE_ENTRIES, "Answers held by the response cache",
                                   ["kind"], registry=r, multiprocess_mode="livesum")
        self.cache_lookup = Histogram(Metric.CACHE_LOOKUP_DURATION,
                                      "Response cache lookup latency", ["kind"],
                                      buckets=CACHE_LOOKUP_BUCKETS, registry=r)
        for kind in ("exact", "semantic"):
            self.cache_entries.labels(kind).set(0)
            self.cache_lookup.labels(kind)
        # The children the request path touches on every request, looked up once.
        self.inflight_of = ChildCache(self.inflight)
        self.queue_wait_of = ChildCache(self.queue_wait)
        self.routing_decision_of = ChildCache(self.routing_decisions)
        # RSS, open fds, CPU: what a leak shows up in first. With workers: those of the worker
        # answering the scrape (process figures do not add up across processes).
        ProcessCollector(registry=self.registry)
        self.loop = LoopMonitor(r, shared=r is None)   # run(): a task of the gateway's lifespan
        self._followed: int | None = None

    def _families_registry(self) -> CollectorRegistry | None:
        """Where the families register: `registry`, or with workers nowhere (their values go
        to the shared files, which `registry`'s MultiProcessCollector reads back)."""
        path = multiprocess_dir()
        if path is None:
            return self.registry
        MultiProcessCollector(self.registry, path=path)
        return None

    def shadow_record(self, record) -> None:
        """Metrics of one finished shadow copy (a gateway.traffic.splits.ShadowRecord)."""
        self.shadow_requests.labels(record.model, record.version, record.outcome).inc()
        self.shadow_duration.labels(record.model, record.version).observe(record.shadow_latency_s)
        if record.shadow_ttft_s is not None:
            self.shadow_ttft.labels(record.model, record.version).observe(record.shadow_ttft_s)
        if record.similarity is not None:
            self.shadow_similarity.labels(record.model).observe(record.similarity)
        if record.error is None and record.primary_chars:
            self.shadow_length_ratio.labels(record.model).observe(
                record.shadow_chars / record.primary_chars)

    def series(self, model: str, version: str) -> RequestSeries:
        """The cached per-request children of (model, version)."""
        key = (model, version)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= SERIES_CACHE_SIZE:
                self._series.clear()
            series = self._series[key] = RequestSeries(self, model, version)
        return series

    def set_breaker(self, backend: str, state: str) -> None:
        self.breaker_state.labels(backend).set(BreakerState(state).code)

    def follow(self, snapshot, strategy_of: Callable[[object], str]) -> None:
        """Initialise the series of `snapshot` once per snapshot version (cheap to call)."""
        if snapshot is not None and snapshot.version != self._followed:
            self.initialise(snapshot, strategy_of)
            self._followed = snapshot.version

    def initialise(self, snapshot, strategy_of: Callable[[object], str]) -> None:
        """Create every known series at zero; `.labels()` leaves existing series untouched."""
        teams = (NO_TEAM, *snapshot.teams)
        for model in snapshot.models.values():
            self._initialise_model(model, strategy_of(model), teams)

    def _initialise_model(self, model, strategy: str, teams) -> None:
        name = model.name
        versions = {NO_VERSION, *(b.version for b in model.backends if b.version),
                    *(s.version for s in model.splits)}
        for version in versions:
            for family in (self.request_duration, self.ttft, self.tpot, self.shadow_duration,
                           self.shadow_ttft):
                family.labels(name, version)
            for code in STATUS_CODES:
                self.requests.labels(name, version, code)
            for kind in TOKEN_KINDS:
                self.tokens.labels(name, version, kind)
            for outcome in SHADOW_OUTCOMES:
                self.shadow_requests.labels(name, version, outcome)
        for family in (self.itl, self.prefix_lookup_tokens, self.prefix_hit_tokens, self.retries,
                       self.fallbacks, self.shadow_similarity, self.shadow_length_ratio):
            family.labels(name)
        for priority in Priority:
            self.queue_depth.labels(name, priority)
            self.queue_wait.labels(name, priority)
        for reason in REJECTION_REASONS:
            self.rejections.labels(name, reason)
        for result in CACHE_RESULTS:
            self.cache_requests.labels(name, result)
        for kind in UpstreamErrorKind:
            self.stream_resumes.labels(name, kind)
        for team in teams:
            self.spend.labels(name, team)
        for backend in model.backends:
            self._initialise_backend(name, backend.id, strategy)

    def _initialise_backend(self, model: str, backend: str, strategy: str) -> None:
        self.breaker_state.labels(backend)   # 0 = BreakerState.CLOSED.code: a new breaker's state
        self.routing_decisions.labels(model, strategy, backend)
        self.prefix_hit_estimate.labels(model, backend)
        self.inflight.labels(model, backend)
        for kind in UpstreamErrorKind:
            self.upstream_errors.labels(model, backend, kind)

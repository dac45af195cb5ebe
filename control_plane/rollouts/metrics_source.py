"""The gateway's own per-version metrics, scraped and reduced to cumulative counts.

A `Scrape` maps (model, version) to `VersionCounts`: requests, 5xx errors and the latency
and TTFT histograms, all cumulative since each gateway started. Shadow copies are kept apart
(`Scrape.shadow`, from the inferplane_shadow_* families): clients never saw them, so they
never mix with client traffic, yet they are the only traffic a mirrored candidate gets.
Analysis never looks at a single scrape, only at `Scrape.since(earlier)` — the traffic of
one interval. Several gateway replicas are summed; a replica that restarted (a counter went
down) contributes its new total rather than a negative delta.

Only the six families above are read (`SAMPLE_NAMES`): a gateway's /metrics grows with every
model, version and backend, and parsing all of it each controller tick costs hundreds of
milliseconds — in `inferplane up` that is the gateway's own event loop, stalling traffic.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from common.metric_names import Metric

REQUESTS = Metric.REQUESTS.total
DURATION = Metric.REQUEST_DURATION
TTFT = Metric.TIME_TO_FIRST_TOKEN
SHADOW_REQUESTS = Metric.SHADOW_REQUESTS.total
SHADOW_DURATION = Metric.SHADOW_REQUEST_DURATION
SHADOW_TTFT = Metric.SHADOW_TIME_TO_FIRST_TOKEN
HISTOGRAMS = (DURATION, TTFT, SHADOW_DURATION, SHADOW_TTFT)
SAMPLE_NAMES = frozenset({REQUESTS, SHADOW_REQUESTS} | {
    h + part for h in HISTOGRAMS for part in ("_bucket", "_count", "_sum")})
# Shadow outcomes the candidate answered (well or not); "dropped" and "no_backend" copies
# never reached it, so they say nothing about it.
SHADOW_ANSWERED = {"ok": False, "error": True, "timeout": True}  # outcome → counts as error
SCRAPE_TIMEOUT_S = 5.0

Key = tuple[str, str]  # (model, version)


class MetricsUnavailable(Exception):
    """A gateway did not answer: a partial sum would read as a counter reset, so no data."""


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound → cumulative count
    count: float = 0.0
    total: float = 0.0

    def add(self, other: Histogram) -> None:
        for bound, n in other.buckets.items():
            self.buckets[bound] = self.buckets.get(bound, 0.0) + n
        self.count += other.count
        self.total += other.total

    def since(self, earlier: Histogram) -> Histogram:
        if self.count < earlier.count:  # restarted: everything it has is new
            return Histogram(dict(self.buckets), self.count, self.total)
        return Histogram({b: n - earlier.buckets.get(b, 0.0) for b, n in self.buckets.items()},
                         self.count - earlier.count, self.total - earlier.total)

    def count_at_most(self, value: float) -> float:
        """Observations ≤ value, interpolated linearly inside the bucket holding value."""
        lower, below = 0.0, 0.0
        for bound in sorted(self.buckets):
            upto = self.buckets[bound]
            if value <= bound:
                if math.isinf(bound):
                    return below
                share = (value - lower) / (bound - lower) if bound > lower else 1.0
                return below + (upto - below) * share
            lower, below = bound, upto
        return below

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket; the +Inf bucket reports
        the highest finite bound. None without observations."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        finite = [b for b in sorted(self.buckets) if not math.isinf(b)]
        for bound in finite:
            upto = self.buckets[bound]
            if upto >= rank:
                inside = upto - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, upto
        return finite[-1] if finite else None


@dataclass
class VersionCounts:
    requests: float = 0.0
    errors: float = 0.0  # status code 5xx
    duration: Histogram = field(default_factory=Histogram)
    ttft: Histogram = field(default_factory=Histogram)

    def add(self, other: VersionCounts) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.duration.add(other.duration)
        self.ttft.add(other.ttft)

    def since(self, earlier: VersionCounts) -> VersionCounts:
        if self.requests < earlier.requests:
            return VersionCounts(self.requests, self.errors, self.duration.since(Histogram()),
                                 self.ttft.since(Histogram()))
        return VersionCounts(self.requests - earlier.requests,
                             max(self.errors - earlier.errors, 0.0),
                             self.duration.since(earlier.duration), self.ttft.since(earlier.ttft))

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass
class Scrape:
    taken_at: float
    series: dict[Key, VersionCounts] = field(default_factory=dict)
    shadow: dict[Key, VersionCounts] = field(default_factory=dict)  # mirrored copies only

    def get(self, model: str, version: str, *, with_shadow: bool = False) -> VersionCounts:
        """Client traffic of the version; with_shadow adds the shadow copies it answered."""
        counts = VersionCounts()
        counts.add(self.series.get((model, version), VersionCounts()))
        if with_shadow:
            counts.add(self.shadow.get((model, version), VersionCounts()))
        return counts

    def model_total(self, model: str) -> VersionCounts:
        total = VersionCounts()
        for (name, _), counts in self.series.items():
            if name == model:
                total.add(counts)
        return total

    def merge(self, other: Scrape) -> None:
        for mine, theirs in ((self.series, other.series), (self.shadow, other.shadow)):
            for key, counts in theirs.items():
                mine.setdefault(key, VersionCounts()).add(counts)

    def since(self, earlier: Scrape) -> Scrape:
        return Scrape(self.taken_at, _deltas(self.series, earlier.series),
                      _deltas(self.shadow, earlier.shadow))

    def window(self, baseline: Scrape | None, window_s: float) -> Scrape:
        """The traffic of the `window_s` seconds before this scrape, from `baseline` (the
        newest kept scrape at least that old; None: everything since the gateways started)."""
        return self.since(baseline) if baseline is not None else self


def _deltas(now: dict[Key, VersionCounts], before: dict[Key, VersionCounts]
            ) -> dict[Key, VersionCounts]:
    return {key: counts.since(before.get(key, VersionCounts())) for key, counts in now.items()}


def parse_metrics(text: str, taken_at: float | None = None) -> Scrape:
    """Prometheus text exposition → Scrape (other metrics are ignored, before parsing)."""
    return from_families(text_string_to_metric_families(_relevant_lines(text)), taken_at)


def from_families(families, taken_at: float | None = None) -> Scrape:
    scrape = Scrape(time.time() if taken_at is None else taken_at)
    for family in families:
        for sample in family.samples:
            if sample.name in SAMPLE_NAMES:
                _absorb(scrape, sample.name, sample.labels, sample.value)
    return scrape


def _relevant_lines(text: str) -> str:
    # Samples of SAMPLE_NAMES only; comments go too (untyped samples keep their full names).
    return "\n".join(line for line in text.splitlines()
                     if line[:1] != "#" and _sample_name(line) in SAMPLE_NAMES) + "\n"


def _sample_name(line: str) -> str:
    end = len(line)
    for stop in ("{", " "):
        at = line.find(stop)
        if 0 <= at < end:
            end = at
    return line[:end]


def _absorb(scrape: Scrape, name: str, labels: dict[str, str], value: float) -> None:
    if "model" not in labels:
        return
    # "<model>:<alias>" traffic counts for its model: a version is judged on all it served
    key = (labels["model"].split(":", 1)[0], labels.get("version", ""))
    if name == REQUESTS:
        counts = scrape.series.setdefault(key, VersionCounts())
        counts.requests += value
        if labels.get("code", "").startswith("5"):
            counts.errors += value
        return
    if name == SHADOW_REQUESTS:
        outcome = labels.get("outcome", "")
        if outcome in SHADOW_ANSWERED:
            counts = scrape.shadow.setdefault(key, VersionCounts())
            counts.requests += value
            counts.errors += value if SHADOW_ANSWERED[outcome] else 0.0
        return
    for prefix, series, pick in ((DURATION, scrape.series, "duration"),
                                 (TTFT, scrape.series, "ttft"),
                                 (SHADOW_DURATION, scrape.shadow, "duration"),
                                 (SHADOW_TTFT, scrape.shadow, "ttft")):
        if name.startswith(prefix) and name[len(prefix):] in ("_bucket", "_count", "_sum"):
            _absorb_histogram(getattr(series.setdefault(key, VersionCounts()), pick),
                              name[len(prefix):], labels, value)
            return


def _absorb_histogram(histogram: Histogram, part: str, labels: dict[str, str],
                      value: float) -> None:
    if part == "_bucket":
        bound = float(labels["le"])
        histogram.buckets[bound] = histogram.buckets.get(bound, 0.0) + value
    elif part == "_count":
        histogram.count += value
    else:
        histogram.total += value


class MetricsSource:
    """Scrapes one or more gateway /metrics URLs and sums them."""

    def __init__(self, urls: Iterable[str], *, client: httpx.AsyncClient | None = None,
                 timeout_s: float = SCRAPE_TIMEOUT_S):
        self.urls = list(urls)
        if not self.urls:
            raise ValueError("MetricsSource needs at least one gateway /metrics URL")
        self._given = client
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None   # made here, for `_loop`
        self._loop = None

    async def scrape(self) -> Scrape:
        client = self._given or self._own_client()
        texts = await asyncio.gather(*(self._fetch(client, url) for url in self.urls))
        return await asyncio.to_thread(_sum_texts, texts)

    def _own_client(self) -> httpx.AsyncClient:
        """One client for every scrape (a new one per tick costs an SSL context, ~1% of a core
        at the default tick); a new one only when called from another event loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:   # first scrape, or another event loop
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
            self._loop = loop
        return self._client

    async def _fetch(self, client: httpx.AsyncClient, url: str) -> str:
        try:
            response = await client.get(url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise MetricsUnavailable(f"scraping {url} failed: {exc!r}") from exc
        return response.text


def _sum_texts(texts: list[str]) -> Scrape:
    total = Scrape(time.time())
    for text in texts:
        total.merge(parse_metrics(text, total.taken_at))
    return total


class RegistryMetricsSource:
    """A prometheus-client registry read in-process (an embedded gateway sharing the control
    plane's process, and tests): only the analysed families are collected, never rendered."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self._restricted = registry.restricted_registry(sorted(SAMPLE_NAMES))

    async def scrape(self) -> Scrape:
        # In a thread: the registry is the serving gateway's, on this event loop.
        return await asyncio.to_thread(lambda: from_families(self._restricted.collect()))


__all__ = ["Histogram", "MetricsSource", "MetricsUnavailable", "RegistryMetricsSource", "Scrape",
           "VersionCounts", "from_families", "parse_metrics"]

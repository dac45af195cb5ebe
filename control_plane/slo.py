"""Error budgets: per-model SLOs (registry `slos` rows) evaluated on the gateway's metrics.

An SLO says "`objective` of requests are good over `window_s`": availability counts 5xx as
bad; ttft / latency count requests slower than `threshold_ms` as bad (read off the histogram
buckets). The budget is the bad requests the objective allows; `remaining` is the fraction
of it left (1 = untouched, 0 = spent, negative = overspent).

Counts over the window come from scrapes the tracker keeps (one per `spacing_s`): the latest
minus the newest one at least a window old. While the history is shorter than the window,
the baseline is zero, i.e. everything the gateways counted since they started. An SLO row
with no model applies to every model.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from common.metric_names import Metric
from control_plane.rollouts.metrics_source import MetricsUnavailable, Scrape, VersionCounts
from registry.orm.catalog import Model
from registry.orm.slos import Slo

log = logging.getLogger("inferplane.slo")
DEFAULT_MIN_REMAINING = 0.1  # below this a rollout refuses to start, or pauses
DEFAULT_SPACING_S = 60.0
MAX_WINDOW_S = 90 * 24 * 3600.0


@dataclass(frozen=True)
class BudgetStatus:
    model: str
    slo: str
    metric: str
    objective: float
    window_s: int
    total: float
    bad: float
    remaining: float

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"model '{self.model}' SLO '{self.slo}' ({self.metric} ≥ {self.objective:g} "
                f"over {self.window_s}s) has {self.remaining:.1%} of its error budget left "
                f"({int(self.bad)} bad of {int(self.total)} requests)")


class SloTracker:
    def __init__(self, sessions: Callable[[], Session], *,
                 registry: CollectorRegistry | None = None,
                 min_remaining: float = DEFAULT_MIN_REMAINING,
                 spacing_s: float = DEFAULT_SPACING_S, clock: Callable[[], float] = time.time):
        self._sessions = sessions
        self.min_remaining = min_remaining
        self.spacing_s = spacing_s
        self._clock = clock
        self._history: deque[Scrape] = deque()
        self._latest: Scrape | None = None
        self.gauge = Gauge(Metric.SLO_ERROR_BUDGET_REMAINING,
                           "Fraction of the SLO's error budget left over its window",
                           ["model", "slo"], registry=registry)

    # --- history ------------------------------------------------------------------------

    def observe(self, scrape: Scrape) -> None:
        self._latest = scrape
        if not self._history or scrape.taken_at - self._history[-1].taken_at >= self.spacing_s:
            self._history.append(scrape)
        while self._history and scrape.taken_at - self._history[0].taken_at > MAX_WINDOW_S:
            self._history.popleft()

    def _window(self, window_s: float) -> Scrape | None:
        if self._latest is None:
            return None
        cutoff = self._clock() - window_s
        baseline = None
        for sample in self._history:
            if sample.taken_at > cutoff:
                break
            baseline = sample
        try:
            return self._latest.window(baseline, window_s)
        except MetricsUnavailable as exc:   # Prometheus down: unknown, so nothing is spent
            log.warning("SLO window unavailable: %s", exc)
            return None

    # --- budgets ------------------------------------------------------------------------

    def budgets(self, session: Session, model: str) -> list[BudgetStatus]:
        model_id = session.scalar(select(Model.id).where(Model.name == model))
        slos = session.scalars(select(Slo).where(
            or_(Slo.model_id.is_(None), Slo.model_id == model_id)).order_by(Slo.id)).all()
        return [self._status(slo, model) for slo in slos]

    def nearly_spent(self, session: Session, model: str) -> list[BudgetStatus]:
        return [b for b in self.budgets(session, model) if b.remaining < self.min_remaining]

    def _status(self, slo: Slo, model: str) -> BudgetStatus:
        window = self._window(slo.window_s)
        counts = window.model_total(model) if window else VersionCounts()
        total, bad = _total_and_bad(slo, counts)
        return BudgetStatus(model, slo.name, slo.metric, slo.objective, slo.window_s, total,
                            bad, _remaining(slo.objective, total, bad))

    def export(self) -> list[BudgetStatus]:
        """Evaluate every SLO into the gauge; a global SLO once per model with traffic."""
        with self._sessions() as session:
            names = set(session.scalars(select(Model.name).join(Slo, Slo.model_id == Model.id)))
            has_global = session.scalar(select(Slo.id).where(Slo.model_id.is_(None)).limit(1))
            if has_global is not None and self._latest is not None:
                names |= {model for model, _ in self._latest.series}
            statuses = [b for name in sorted(names) for b in self.budgets(session, name)]
        for status in statuses:
            self.gauge.labels(status.model, status.slo).set(status.remaining)
        return statuses


def _total_and_bad(slo: Slo, counts: VersionCounts) -> tuple[float, float]:
    if slo.metric == "availability":
        return counts.requests, counts.errors
    histogram = counts.ttft if slo.metric == "ttft" else counts.duration
    if slo.threshold_ms is None:
        return 0.0, 0.0  # a latency objective without a threshold measures nothing
    good = histogram.count_at_most(slo.threshold_ms / 1000.0)
    return histogram.count, max(histogram.count - good, 0.0)


def _remaining(objective: float, total: float, bad: float) -> float:
    allowed = total * (1.0 - objective)
    if total <= 0:
        return 1.0
    if allowed <= 0:
        return 1.0 if bad <= 0 else 0.0
    return 1.0 - bad / allowed


__all__ = ["BudgetStatus", "DEFAULT_MIN_REMAINING", "SloTracker"]

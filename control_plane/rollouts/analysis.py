"""One measurement: the candidate's traffic over an interval against the stable version's.

    result = measure(scrape.since(baseline), "chat", "v1", "v2", spec.analysis, 60.0)
    result.verdict        # "pass" | "fail" | "inconclusive"
    result.as_dict()      # the numbers behind it, as the rollout API shows them

Inputs are deltas between two scrapes of the gateway's per-version metrics, so both sides
saw the same clock window. A side with fewer than `min_requests` makes the measurement
inconclusive (never a pass: too little traffic proves nothing); `idle` says the model got
no client traffic at all, so there was nothing to measure rather than unusable data.
P95s come from histogram buckets the way Prometheus' histogram_quantile computes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from control_plane.rollouts.metrics_source import Scrape, VersionCounts
from control_plane.rollouts.spec import Analysis, ErrorRateRatio

Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass
class Check:
    name: str
    candidate: float | None
    stable: float | None
    limit: float | None
    ok: bool


@dataclass
class Side:
    """What one version did in the interval."""
    version: str
    requests: float
    errors: float
    error_rate: float
    p95_latency_s: float | None
    ttft_p95_s: float | None

    @classmethod
    def of(cls, version: str, counts: VersionCounts) -> Side:
        return cls(version, counts.requests, counts.errors, counts.error_rate,
                   counts.duration.quantile(0.95), counts.ttft.quantile(0.95))


@dataclass
class Measurement:
    verdict: Verdict
    message: str
    candidate_requests: float
    stable_requests: float
    interval_s: float
    checks: list[Check] = field(default_factory=list)
    candidate: Side | None = None
    stable: Side | None = None
    # client requests to the model in the interval, every version; None: unknown
    model_requests: float | None = 0.0
    thresholds: dict[str, Any] = field(default_factory=dict)

    @property
    def idle(self) -> bool:
        return self.model_requests == 0 and self.candidate_requests == 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"idle": self.idle}


def measure(delta: Scrape, model: str, stable: str, candidate: str, spec: Analysis,
            interval_s: float, *, mirrored: bool = False) -> Measurement:
    """`mirrored`: clients are not sent to the candidate (shadow, blue/green's gate), so its
    side also counts the shadow copies it answered; the stable side is client traffic only."""
    cand = delta.get(model, candidate, with_shadow=mirrored)
    base = delta.get(model, stable)
    sides = dict(candidate=Side.of(candidate, cand), stable=Side.of(stable, base),
                 model_requests=delta.model_total(model).requests,
                 thresholds=spec.model_dump(mode="json"))
    served = "answered (shadow copies included)" if mirrored else "served"
    short = [f"{name} '{version}' {verb} {int(side.requests)} requests"
             for name, version, side, verb in (("candidate", candidate, cand, served),
                                               ("stable", stable, base, "served"))
             if side.requests < spec.min_requests]
    if short:
        message = "; ".join(short) + f", fewer than min_requests={spec.min_requests}"
        return Measurement("inconclusive", message, cand.requests, base.requests, interval_s,
                           **sides)
    checks = _checks(cand, base, spec)
    failed = [c for c in checks if not c.ok]
    verdict: Verdict = "fail" if failed else "pass"
    message = "; ".join(_describe(c) for c in failed) if failed else \
        f"{len(checks)} checks passed"
    return Measurement(verdict, message, cand.requests, base.requests, interval_s, checks,
                       **sides)


def unavailable(reason: str, interval_s: float, spec: Analysis) -> Measurement:
    """A due measurement without metrics: inconclusive, and never idle (traffic unknown)."""
    return Measurement("inconclusive", f"no gateway metrics: {reason}", 0.0, 0.0, interval_s,
                       model_requests=None, thresholds=spec.model_dump(mode="json"))


def _checks(cand: VersionCounts, base: VersionCounts, spec: Analysis) -> list[Check]:
    checks = []
    if spec.max_error_rate is not None:
        checks.append(_error_rate(cand, base, spec.max_error_rate))
    if spec.max_p95_latency_ratio is not None:
        checks.append(_p95_ratio("p95_latency_s", cand.duration.quantile(0.95),
                                 base.duration.quantile(0.95), spec.max_p95_latency_ratio))
    if spec.max_ttft_p95_ratio is not None:
        checks.append(_p95_ratio("ttft_p95_s", cand.ttft.quantile(0.95),
                                 base.ttft.quantile(0.95), spec.max_ttft_p95_ratio))
    return checks


def _error_rate(cand: VersionCounts, base: VersionCounts,
                limit: float | ErrorRateRatio) -> Check:
    if isinstance(limit, ErrorRateRatio):
        # A stable side with no errors would make any candidate error an infinite ratio;
        # count it as having one error, the smallest rate this interval can resolve.
        floor = 1.0 / base.requests
        allowed = limit.ratio_to_stable * max(base.error_rate, floor)
    else:
        allowed = limit
    return Check("error_rate", cand.error_rate, base.error_rate, allowed,
                 cand.error_rate <= allowed)


def _p95_ratio(name: str, cand: float | None, base: float | None, ratio: float) -> Check:
    if cand is None or base is None:
        # No observations of this histogram on a side (e.g. no streamed requests, no TTFT):
        # nothing to compare, so this check cannot fail the candidate.
        return Check(name, cand, base, None, True)
    allowed = ratio * base
    return Check(name, cand, base, allowed, cand <= allowed)


def _describe(check: Check) -> str:
    return (f"{check.name} {check.candidate:.4g} exceeds {check.limit:.4g} "
            f"(stable {check.stable:.4g})")


__all__ = ["Check", "Measurement", "Side", "measure", "unavailable"]

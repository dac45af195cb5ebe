"""From one measurement to what the rollout does next: the analysis semantics of Flagger and
Argo Rollouts, in one place.

    decision = decide(result, t.status_of(rollout), spec.analysis)
    status.update(decision.counters)          # failures, inconclusive, passed_in_step
    if decision.abort: roll back, giving decision.reason

- pass          counts toward the step (`passed_in_step`); ends an inconclusive streak.
- fail          counts in `failures`; more than `failure_limit` of them → abort.
- inconclusive  too few requests on a side, or no metrics at all: retried next interval.
                While the model has traffic this grows the streak (`inconclusive`); a streak
                longer than `max_inconclusive` → abort — a candidate that takes traffic but
                yields nothing to judge is treated as failed, never waited on for ever.
  idle          inconclusive because nobody sent the model a request: nothing was learnt and
                nothing was at risk, so it is retried without counting.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from control_plane.rollouts.analysis import Measurement
from control_plane.rollouts.spec import Analysis


@dataclass
class Decision:
    abort: bool
    note: str  # what the measurement led to, appended to its event
    reason: str = ""  # why the rollout aborts (abort only)
    counters: dict[str, Any] = field(default_factory=dict)


def decide(result: Measurement, status: dict[str, Any], spec: Analysis) -> Decision:
    failures = status.get("failures", 0)
    streak = status.get("inconclusive", 0)
    passed = status.get("passed_in_step", 0)
    if result.verdict == "pass":
        return Decision(False, "counts toward the step",
                        counters=_counters(failures, 0, passed + 1))
    if result.verdict == "fail":
        failures += 1
        counters = _counters(failures, 0, passed)
        if failures > spec.failure_limit:
            return Decision(True, "rolling back", f"{failures} failed measurements "
                            f"(failure_limit {spec.failure_limit}); last: {result.message}",
                            counters)
        return Decision(False, f"failure {failures} of {spec.failure_limit} tolerated",
                        counters=counters)
    if result.idle:
        return Decision(False, "the model had no traffic; retried next interval",
                        counters=_counters(failures, streak, passed))
    streak += 1
    counters = _counters(failures, streak, passed)
    if streak > spec.max_inconclusive:
        return Decision(True, "rolling back", f"{streak} inconclusive measurements in a row "
                        f"(max_inconclusive {spec.max_inconclusive}) while the model had "
                        f"traffic: the candidate yields no usable data; last: {result.message}",
                        counters)
    return Decision(False, f"inconclusive {streak} of {spec.max_inconclusive} tolerated in a "
                    f"row; retried next interval", counters=counters)


def _counters(failures: int, inconclusive: int, passed_in_step: int) -> dict[str, int]:
    return {"failures": failures, "inconclusive": inconclusive,
            "passed_in_step": passed_in_step}


__all__ = ["Decision", "decide"]

"""What one measurement leads to: counters, retries and the bounded rules that abort."""
from __future__ import annotations

import pytest

from control_plane.rollouts.analysis import Measurement, unavailable
from control_plane.rollouts.spec import Analysis
from control_plane.rollouts.verdicts import decide

SPEC = Analysis(min_requests=10, max_error_rate=0.05, failure_limit=1, max_inconclusive=2)


def result(verdict: str, *, candidate: float = 30, model: float | None = 60) -> Measurement:
    return Measurement(verdict, "why", candidate, 30, 60.0, model_requests=model)


def test_a_pass_counts_toward_the_step_and_ends_an_inconclusive_streak():
    decision = decide(result("pass"), {"failures": 1, "inconclusive": 2, "passed_in_step": 0},
                      SPEC)
    assert not decision.abort
    assert decision.counters == {"failures": 1, "inconclusive": 0, "passed_in_step": 1}


def test_failures_past_the_limit_abort():
    first = decide(result("fail"), {}, SPEC)
    assert not first.abort and first.counters["failures"] == 1
    assert first.note == "failure 1 of 1 tolerated"
    second = decide(result("fail"), first.counters, SPEC)
    assert second.abort and second.reason.startswith("2 failed measurements (failure_limit 1)")


def test_an_inconclusive_streak_longer_than_max_inconclusive_aborts():
    status: dict = {}
    for streak in (1, 2):
        decision = decide(result("inconclusive", candidate=3), status, SPEC)
        assert not decision.abort and decision.counters["inconclusive"] == streak
        status = decision.counters
    decision = decide(result("inconclusive", candidate=3), status, SPEC)
    assert decision.abort and "3 inconclusive measurements in a row" in decision.reason
    assert "last: why" in decision.reason


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_max_inconclusive_is_the_number_tolerated(limit):
    spec = SPEC.model_copy(update={"max_inconclusive": limit})
    status: dict = {}
    for n in range(1, limit + 2):
        decision = decide(result("inconclusive"), status, spec)
        status = decision.counters
        assert decision.abort == (n == limit + 1)


def test_an_idle_model_is_retried_without_counting():
    status = {"failures": 0, "inconclusive": 2, "passed_in_step": 0}
    for _ in range(10):
        decision = decide(result("inconclusive", candidate=0, model=0), status, SPEC)
        assert not decision.abort and decision.counters == status
    assert "no traffic" in decision.note


def test_missing_metrics_are_never_idle():
    measurement = unavailable("scraping failed", 60.0, SPEC)
    assert measurement.verdict == "inconclusive" and not measurement.idle
    assert measurement.as_dict()["model_requests"] is None
    assert decide(measurement, {"inconclusive": 2}, SPEC).abort

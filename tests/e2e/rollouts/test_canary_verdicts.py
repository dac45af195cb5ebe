"""The canary verdict, run again and again against live processes: a candidate that fails
half its requests at weight 0.5 is rolled back every time within a few analysis intervals,
with the alias left on v1; a healthy candidate is promoted every time. The gateway counts
every request the split sent to the candidate under the candidate's version, refusals
included (an open breaker's 503s), so what clients saw and what the analysis measured agree.

Each round runs one failing and one healthy rollout side by side (two models, one
controller), which halves the wall time and shows that verdicts do not leak between models.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from tests.e2e.rollouts.stack import FINAL, FLAKY_MARKER, Stack, Traffic, send

ROUNDS = 5
INTERVAL_S = 2.0
ANALYSIS = {"interval_s": INTERVAL_S, "min_requests": 5, "max_error_rate": 0.05,
            "max_inconclusive": 3}
STEP = {"weight": 0.5, "pause_s": 1}
# At most this many measurements before a verdict: the inconclusive ones tolerated, then one.
MAX_MEASUREMENTS = ANALYSIS["max_inconclusive"] + 1


@dataclass
class Run:
    model: str
    rollout_id: int
    traffic: Traffic
    before: dict[str, float]
    rollout: dict | None = None
    served: dict[str, float] | None = None


def start(stack: Stack, model: str, v2_engine: str) -> Run:
    stack.register(model, v1="sim-a", v2=v2_engine)
    before = stack.served_by_version(model)
    traffic = Traffic(stack, model, threads=3).__enter__()
    rid = stack.admin("POST", "/rollouts", {
        "model": model, "candidate_version": "v2", "steps": [STEP], "analysis": ANALYSIS,
        "warm_delay_s": 0})["id"]
    return Run(model, rid, traffic, before)


def finish_all(stack: Stack, runs: list[Run], timeout: float = 40.0) -> None:
    """Wait until every rollout ended (a pause fails at once), then stop their traffic."""
    deadline = time.monotonic() + timeout
    while any(r.rollout is None for r in runs):
        for run in (r for r in runs if r.rollout is None):
            rollout = stack.admin("GET", f"/rollouts/{run.rollout_id}")
            assert rollout["state"] != "paused", rollout
            if rollout["state"] in FINAL:
                run.rollout = rollout
                run.traffic.__exit__(None, None, None)
                after = stack.served_by_version(run.model)
                run.served = {v: after[v] - n for v, n in run.before.items()}
        assert time.monotonic() < deadline, [r.model for r in runs if r.rollout is None]
        time.sleep(0.2)


def seconds_between(rollout: dict, first: str, last: str) -> float:
    at = {e["kind"]: datetime.fromisoformat(e["at"]) for e in rollout["events"]}
    return (at[last] - at[first]).total_seconds()


def check_rolled_back(stack: Stack, run: Run) -> tuple[float, float]:
    """The failing canary's verdict; returns the (candidate, stable) requests it measured."""
    rollout = run.rollout
    assert rollout["state"] == "rolled_back", rollout["reason"]
    assert stack.alias(run.model) == "v1"
    results = [m["result"] for m in rollout["measurements"]]
    assert results[-1]["verdict"] == "fail" and len(results) <= MAX_MEASUREMENTS, results
    assert all(r["verdict"] == "inconclusive" for r in results[:-1])
    # A few intervals at most from the canary step to the rollback (ticks are late on a
    # loaded machine: one interval of slack).
    assert seconds_between(rollout, "progressing", "aborting") \
        <= (MAX_MEASUREMENTS + 1) * INTERVAL_S
    failed = results[-1]
    assert failed["candidate"]["error_rate"] > 0.05 and failed["stable"]["errors"] == 0
    assert failed["candidate"]["requests"] >= ANALYSIS["min_requests"]
    aborting = next(e for e in rollout["events"] if e["kind"] == "aborting")
    assert aborting["weight"] == 0.0 and aborting["result"]["verdict"] == "fail"
    # Every client failure is on v2's books: v1 never fails and nothing is labelled "none".
    replies = run.traffic.replies
    assert any(r.status >= 500 for r in replies) and run.served["none"] == 0
    assert run.served["v1"] + run.served["v2"] == len(replies)
    v2_ok = sum(r.status == 200 and FLAKY_MARKER in r.text for r in replies)
    assert run.served["v2"] - v2_ok == sum(r.status >= 500 for r in replies)
    after = send(stack, run.model, 10)  # once rolled back, v1 serves everyone
    assert [r.status for r in after] == [200] * 10
    assert not any(FLAKY_MARKER in r.text for r in after)
    return failed["candidate"]["requests"], failed["stable"]["requests"]


def check_promoted(stack: Stack, run: Run) -> None:
    rollout = run.rollout
    assert rollout["state"] == "succeeded", rollout
    assert stack.alias(run.model) == "v2"
    results = [m["result"] for m in rollout["measurements"]]
    assert results[-1]["verdict"] == "pass" and len(results) <= MAX_MEASUREMENTS, results
    assert "fail" not in {r["verdict"] for r in results}
    replies = run.traffic.replies
    assert replies and all(r.status == 200 for r in replies)
    assert run.served["v2"] > 0 and run.served["none"] == 0


def test_failing_canary_rolls_back_and_healthy_canary_promotes_every_time(stack):
    shares = []
    for n in range(ROUNDS):
        failing = start(stack, f"half-bad-{n}", "half")
        healthy = start(stack, f"healthy-{n}", "sim-b")
        try:
            finish_all(stack, [failing, healthy])
        finally:
            for run in (failing, healthy):
                run.traffic.__exit__(None, None, None)
        shares.append(check_rolled_back(stack, failing))
        check_promoted(stack, healthy)
    # The split honours weight 0.5 in the measured intervals (all rounds together).
    candidate, stable = map(sum, zip(*shares))
    assert 0.35 <= candidate / (candidate + stable) <= 0.65, shares

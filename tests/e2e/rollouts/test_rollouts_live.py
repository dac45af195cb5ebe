"""Rollouts end to end: `inferplane up` routes live client traffic to real engine processes
while its rollout controller analyses the gateway's own per-version metrics and moves the
alias (or does not). Each test registers its own model through the admin API."""
from __future__ import annotations

import time

import httpx

from common.metric_names import Metric
from tests.e2e.rollouts.stack import FLAKY_MARKER, Stack, Traffic, send

ANALYSIS = {"interval_s": 2.0, "min_requests": 4, "max_error_rate": 0.1, "failure_limit": 0}
CANARY_STEPS = [{"weight": 0.2, "pause_s": 1}, {"weight": 0.5, "pause_s": 1}]


def start_rollout(stack: Stack, model: str, **spec) -> int:
    body = {"model": model, "candidate_version": "v2", "analysis": ANALYSIS,
            "warm_delay_s": 0, **spec}
    return stack.admin("POST", "/rollouts", body)["id"]


def kinds(rollout: dict) -> list[str]:
    return [e["kind"] for e in rollout["events"]]


def step_weights(rollout: dict) -> list[float]:
    return [e["weight"] for e in rollout["events"] if e["kind"] == "progressing"]


def verdicts(rollout: dict) -> list[tuple[int, str]]:
    return [(m["step"], m["result"]["verdict"]) for m in rollout["measurements"]]


def flaky_stats(stack: Stack) -> dict:
    return httpx.get(f"http://127.0.0.1:{stack.engines['flaky'].port}/flaky-stats").json()


def assert_all_served_by(stack: Stack, model: str, version: str, other: str, n: int = 20):
    before = stack.served(model, version), stack.served(model, other)
    replies = send(stack, model, n)
    assert [r.status for r in replies] == [200] * n, [r.text for r in replies if r.status != 200]
    after = stack.served(model, version), stack.served(model, other)
    assert (after[0] - before[0], after[1] - before[1]) == (n, 0)
    return replies


def test_canary_with_failing_candidate_is_rolled_back(stack):
    stack.register("canary-bad", v1="sim-a", v2="flaky")
    with Traffic(stack, "canary-bad") as traffic:
        rollout = stack.wait_final(start_rollout(stack, "canary-bad", steps=CANARY_STEPS))

    assert rollout["state"] == "rolled_back" and rollout["weight"] == 0.0
    assert kinds(rollout)[-2:] == ["aborting", "rolled_back"]
    aborting = next(e for e in rollout["events"] if e["kind"] == "aborting")
    assert "failed measurements" in aborting["message"] and aborting["weight"] == 0.0
    failed = [m["result"] for m in rollout["measurements"] if m["result"]["verdict"] == "fail"]
    assert failed, rollout["measurements"]
    check = next(c for c in failed[0]["checks"] if c["name"] == "error_rate")
    assert check["candidate"] > 0.1 and check["stable"] == 0.0
    assert stack.alias("canary-bad") == "v1"
    # Clients did meet the candidate while it was canaried: its failures are what tripped it.
    assert any(r.status >= 500 for r in traffic.replies)
    assert any(FLAKY_MARKER in r.text for r in traffic.replies if r.status == 200)
    replies = assert_all_served_by(stack, "canary-bad", "v1", "v2")
    assert not any(FLAKY_MARKER in r.text for r in replies)


def test_healthy_canary_is_promoted_step_by_step(stack):
    stack.register("canary-good", v1="sim-a", v2="sim-b")
    with Traffic(stack, "canary-good") as traffic:
        rollout = stack.wait_final(start_rollout(stack, "canary-good", steps=CANARY_STEPS))

    assert rollout["state"] == "succeeded", rollout["reason"]
    assert kinds(rollout) == ["pending", "progressing", "progressing", "promoting", "succeeded"]
    assert step_weights(rollout) == [0.2, 0.5]
    passed_steps = {step for step, verdict in verdicts(rollout) if verdict == "pass"}
    assert passed_steps == {0, 1} and "fail" not in {v for _, v in verdicts(rollout)}
    assert stack.alias("canary-good") == "v2"
    assert traffic.replies and all(r.status == 200 for r in traffic.replies)
    assert_all_served_by(stack, "canary-good", "v2", "v1")


def test_blue_green_mirrors_during_its_gate_then_switches_at_once(stack):
    stack.register("bluegreen", v1="sim-a", v2="sim-b")
    gate_served_v2: list[float] = []  # client requests v2 had served, seen during the gate
    with Traffic(stack, "bluegreen") as traffic:
        rollout_id = start_rollout(stack, "bluegreen", strategy="blue_green")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            before = stack.admin("GET", f"/rollouts/{rollout_id}")["state"]
            served = stack.served("bluegreen", "v2")
            after = stack.admin("GET", f"/rollouts/{rollout_id}")["state"]
            if before == after == "progressing":
                gate_served_v2.append(served)
            if after not in ("pending", "progressing"):
                break
            time.sleep(0.1)
        rollout = stack.wait_final(rollout_id)

    assert rollout["state"] == "succeeded", rollout["reason"]
    assert rollout["spec"]["steps"] == [{"weight": 1.0, "pause_s": ANALYSIS["interval_s"]}]
    assert kinds(rollout) == ["pending", "progressing", "promoting", "succeeded"]
    assert step_weights(rollout) == [1.0]
    # The gate measured mirrored copies only: no client was served by v2 before the switch.
    assert gate_served_v2 and set(gate_served_v2) == {0.0}
    gate = [m["result"] for m in rollout["measurements"] if m["result"]["verdict"] == "pass"]
    assert gate and gate[0]["candidate_requests"] >= ANALYSIS["min_requests"]
    assert stack.metric(Metric.SHADOW_REQUESTS.total, model="bluegreen", version="v2",
                        outcome="ok") > 0
    assert stack.alias("bluegreen") == "v2"
    assert all(r.status == 200 for r in traffic.replies)
    assert_all_served_by(stack, "bluegreen", "v2", "v1")


def test_shadow_never_touches_client_responses(stack):
    stack.register("shadow", v1="sim-a", v2="flaky")
    flaky_before = flaky_stats(stack)
    with Traffic(stack, "shadow") as traffic:
        rollout = stack.wait_final(start_rollout(stack, "shadow", strategy="shadow",
                                                 steps=[{"weight": 1.0, "pause_s": 1}]))
    flaky_after = flaky_stats(stack)

    # Every client answer came from v1, though a third of the mirrored copies failed.
    assert len(traffic.replies) >= 20
    assert [r.status for r in traffic.replies] == [200] * len(traffic.replies)
    assert not any(FLAKY_MARKER in r.text for r in traffic.replies)
    assert stack.served("shadow", "v2") == 0
    assert flaky_after["requests"] > flaky_before["requests"]
    assert flaky_after["failed"] > flaky_before["failed"]
    for outcome in ("ok", "error"):
        assert stack.metric(Metric.SHADOW_REQUESTS.total, model="shadow", version="v2",
                            outcome=outcome) > 0
    # The shadow copies were measured, and their failures rolled the candidate back.
    assert rollout["state"] == "rolled_back", rollout["reason"]
    failed = [m["result"] for m in rollout["measurements"] if m["result"]["verdict"] == "fail"]
    assert failed and failed[0]["candidate_requests"] >= ANALYSIS["min_requests"]
    assert stack.alias("shadow") == "v1"

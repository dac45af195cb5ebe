"""The state machine driven tick by tick over real SQLite and real gateway metrics."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from sqlalchemy import select

from common.metric_names import Metric
from control_plane.rollouts import store
from control_plane.rollouts import transitions as t
from control_plane.rollouts.controller import RolloutController
from control_plane.rollouts.metrics_source import MetricsUnavailable, RegistryMetricsSource
from control_plane.rollouts.spec import RolloutCreate
from registry import queries as q
from registry.orm.audit import AuditLog
from registry.orm.slos import Slo
from registry.snapshot import SplitView, build_snapshot
from tests.control_plane.rollouts.conftest import MODEL

ANALYSIS = {"interval_s": 60, "min_requests": 20, "max_error_rate": 0.05,
            "max_p95_latency_ratio": 1.5, "failure_limit": 0}


def start(sessions, clock, **spec) -> int:
    body = RolloutCreate.model_validate({"model": MODEL, "candidate_version": "v2", **spec})
    with sessions.begin() as s:
        rollout = store.create(s, body, clock())
        q.bump_snapshot_version(s)
        return rollout.id


def view(sessions, rollout_id: int) -> dict:
    with sessions() as s:
        rollout = store.load(s, rollout_id)
        return store.render(rollout, MODEL)


def splits(sessions) -> tuple[SplitView, ...]:
    with sessions() as s:
        return build_snapshot(s).models[MODEL].splits


def alias_version(sessions) -> str:
    with sessions() as s:
        return q.get_alias(s, q.get_model(s, MODEL), "default").version.label


async def interval(controller, clock, traffic, *, v1=50, v2=50, v2_code="200", v2_latency=0.1):
    """One analysis interval of traffic, then the tick that measures it."""
    traffic.send("v1", v1)
    traffic.send("v2", v2, code=v2_code, latency_s=v2_latency)
    clock.advance(60)
    await controller.tick()


async def test_canary_walks_its_steps_and_promotes_by_swapping_the_alias(
        sessions, controller, clock, traffic, exported):
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 60},
                                        {"weight": 0.5, "pause_s": 60}],
                analysis=ANALYSIS, warm_delay_s=120)
    assert view(sessions, rid)["state"] == "pending"
    assert splits(sessions) == (SplitView("v1", 1.0),)

    await controller.tick()  # health gate passes (v2 has a ready backend) → step 0
    r = view(sessions, rid)
    assert (r["state"], r["step"], r["weight"]) == ("progressing", 0, 0.1)
    assert splits(sessions) == (SplitView("v1", 0.9), SplitView("v2", 0.1))

    await controller.tick()  # baseline scrape for step 0
    await interval(controller, clock, traffic)  # passes; pause over → step 1
    r = view(sessions, rid)
    assert (r["state"], r["step"], r["weight"]) == ("progressing", 1, 0.5)
    assert [m["result"]["verdict"] for m in r["measurements"]] == ["pass"]
    assert r["measurements"][0]["result"]["candidate_requests"] == 50

    await interval(controller, clock, traffic)  # last step passes → promoting
    r = view(sessions, rid)
    assert r["state"] == "promoting" and r["weight"] == 1.0
    assert alias_version(sessions) == "v2"
    # The old version is still in the routing table (weight 0) while it stays warm.
    assert splits(sessions) == (SplitView("v1", 0.0), SplitView("v2", 1.0))

    clock.advance(60)
    await controller.tick()
    assert view(sessions, rid)["state"] == "promoting"
    clock.advance(60)
    await controller.tick()
    assert view(sessions, rid)["state"] == "succeeded"
    assert splits(sessions) == (SplitView("v2", 1.0),)

    text = generate_latest(exported).decode()
    assert f'{Metric.ROLLOUT_STATE}{{model="chat",rollout="{rid}"}} 4.0' in text
    with sessions() as s:
        actions = s.scalars(select(AuditLog.action).where(AuditLog.resource_type == "rollout"))
        assert {"rollout_progressing", "rollout_promoting", "rollout_succeeded"} <= set(actions)
    assert controller.changes  # on_change ran for the routing changes


async def test_failing_candidate_is_rolled_back_and_the_alias_never_moves(
        sessions, controller, clock, traffic):
    rid = start(sessions, clock, steps=[{"weight": 0.2, "pause_s": 0}], analysis=ANALYSIS)
    await controller.tick()
    await controller.tick()
    await interval(controller, clock, traffic, v2_code="503")
    r = view(sessions, rid)
    assert r["state"] == "aborting" and r["weight"] == 0.0
    assert "error_rate 1 exceeds 0.05" in r["reason"]
    assert splits(sessions) == (SplitView("v1", 1.0), SplitView("v2", 0.0))
    await controller.tick()
    assert view(sessions, rid)["state"] == "rolled_back"
    assert alias_version(sessions) == "v1"
    assert splits(sessions) == (SplitView("v1", 1.0),)


async def test_slow_candidate_fails_the_latency_ratio(sessions, controller, clock, traffic):
    rid = start(sessions, clock, steps=[{"weight": 0.2, "pause_s": 0}],
                analysis={**ANALYSIS, "failure_limit": 1})
    await controller.tick()
    await controller.tick()
    await interval(controller, clock, traffic, v2_latency=3.0)
    r = view(sessions, rid)
    assert r["state"] == "progressing" and r["failures"] == 1  # one failure is tolerated
    check = r["measurements"][0]["result"]["checks"][1]
    assert check["name"] == "p95_latency_s" and not check["ok"] and check["candidate"] > 2.5
    await interval(controller, clock, traffic, v2_latency=3.0)
    assert view(sessions, rid)["state"] == "aborting"


async def test_inconclusive_is_retried_then_fails_the_rollout_after_max_inconclusive(
        sessions, controller, clock, traffic):
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0}],
                analysis={**ANALYSIS, "max_inconclusive": 2})
    await controller.tick()
    await controller.tick()
    for streak in (1, 2):  # the candidate takes traffic, but too little to judge
        await interval(controller, clock, traffic, v2=3)
        r = view(sessions, rid)
        assert (r["state"], r["weight"], r["inconclusive"]) == ("progressing", 0.1, streak)
        assert splits(sessions) == (SplitView("v1", 0.9), SplitView("v2", 0.1))
    last = r["measurements"][-1]
    assert "candidate 'v2' served 3 requests" in last["message"]
    assert "inconclusive 2 of 2 tolerated in a row" in last["message"]
    assert last["result"]["candidate"]["requests"] == 3
    assert last["result"]["stable"]["requests"] == 50
    assert last["result"]["thresholds"]["min_requests"] == 20

    await interval(controller, clock, traffic, v2=3)  # one more than tolerated: failed
    r = view(sessions, rid)
    assert r["state"] == "aborting" and r["weight"] == 0.0
    assert "3 inconclusive measurements in a row (max_inconclusive 2)" in r["reason"]
    aborting = next(e for e in r["events"] if e["kind"] == "aborting")
    assert aborting["result"]["candidate"]["requests"] == 3  # the numbers behind it
    await controller.tick()
    assert view(sessions, rid)["state"] == "rolled_back" and alias_version(sessions) == "v1"


async def test_a_conclusive_measurement_ends_the_streak_and_idle_intervals_do_not_count(
        sessions, controller, clock, traffic):
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0},
                                        {"weight": 0.5, "pause_s": 0}],
                analysis={**ANALYSIS, "max_inconclusive": 1})
    await controller.tick()
    await controller.tick()
    await interval(controller, clock, traffic, v2=3)
    assert view(sessions, rid)["inconclusive"] == 1
    for _ in range(3):  # nobody sent the model anything: nothing to learn, nothing at risk
        await interval(controller, clock, traffic, v1=0, v2=0)
    r = view(sessions, rid)
    assert (r["state"], r["step"], r["inconclusive"]) == ("progressing", 0, 1)
    assert r["measurements"][-1]["result"]["idle"] is True
    assert "the model had no traffic" in r["measurements"][-1]["message"]
    await interval(controller, clock, traffic)  # passes: step 1, streak over
    r = view(sessions, rid)
    assert (r["state"], r["step"], r["inconclusive"]) == ("progressing", 1, 0)


async def test_missing_metrics_count_as_inconclusive(sessions, clock, traffic):
    source = FlakySource(RegistryMetricsSource(traffic.metrics.registry))
    ctl = RolloutController(sessions, source, clock=clock)
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0}],
                analysis={**ANALYSIS, "max_inconclusive": 1})
    await ctl.tick()
    await ctl.tick()
    source.down = True
    for _ in range(2):
        traffic.send("v2", 50, code="200")
        clock.advance(60)
        await ctl.tick()
    r = view(sessions, rid)
    assert r["state"] == "aborting", r["reason"]
    assert "no gateway metrics: gateway down" in r["reason"]


async def test_metrics_back_after_an_outage_start_a_full_interval(sessions, clock, traffic):
    source = FlakySource(RegistryMetricsSource(traffic.metrics.registry))
    ctl = RolloutController(sessions, source, clock=clock)
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0}], analysis=ANALYSIS)
    await ctl.tick()  # step 0
    source.down = True
    await ctl.tick()  # the interval begins without a baseline scrape
    source.down = False
    clock.advance(59)
    await ctl.tick()  # metrics are back: the baseline of a full interval from here
    clock.advance(1)
    await ctl.tick()  # the outage's interval was due now: no 1-second measurement
    assert view(sessions, rid)["measurements"] == []
    await interval(ctl, clock, traffic)
    r = view(sessions, rid)
    assert [m["result"]["verdict"] for m in r["measurements"]] == ["pass"]
    assert r["measurements"][0]["result"]["interval_s"] == 61  # since the metrics came back


class FlakySource:
    def __init__(self, inner):
        self.inner, self.down = inner, False

    async def scrape(self):
        if self.down:
            raise MetricsUnavailable("gateway down")
        return await self.inner.scrape()


async def test_pause_routes_nothing_to_the_candidate_and_resume_restarts_the_step(
        sessions, controller, clock, traffic):
    rid = start(sessions, clock, steps=[{"weight": 0.3, "pause_s": 0}], analysis=ANALYSIS)
    await controller.tick()
    assert splits(sessions) == (SplitView("v1", 0.7), SplitView("v2", 0.3))
    with sessions.begin() as s:
        t.pause(s, store.load(s, rid), "pause by test", clock())
    r = view(sessions, rid)
    assert (r["state"], r["weight"]) == ("paused", 0.0)
    assert splits(sessions) == (SplitView("v1", 1.0), SplitView("v2", 0.0))
    await interval(controller, clock, traffic, v2_code="503")  # paused: nothing measured
    assert view(sessions, rid)["measurements"] == []

    with sessions.begin() as s:
        t.resume(s, store.load(s, rid), "resume by test", clock())
    assert view(sessions, rid)["weight"] == 0.3
    await controller.tick()  # fresh baseline after resume
    await interval(controller, clock, traffic)
    assert view(sessions, rid)["state"] == "promoting"


async def test_shadow_mirrors_and_never_serves_the_candidate(sessions, controller, clock,
                                                             traffic):
    rid = start(sessions, clock, strategy="shadow", steps=[{"weight": 0.5, "pause_s": 0}],
                analysis=ANALYSIS, warm_delay_s=0)
    await controller.tick()
    assert splits(sessions) == (SplitView("v1", 1.0), SplitView("v2", 0.5, shadow=True))
    await controller.tick()
    await interval(controller, clock, traffic)
    assert view(sessions, rid)["state"] == "promoting"
    assert splits(sessions) == (SplitView("v1", 0.0), SplitView("v2", 1.0))


async def test_blue_green_gates_on_mirrored_traffic_then_switches_at_once(
        sessions, controller, clock, traffic):
    rid = start(sessions, clock, strategy="blue_green", analysis=ANALYSIS, warm_delay_s=0)
    await controller.tick()
    assert splits(sessions) == (SplitView("v1", 1.0), SplitView("v2", 1.0, shadow=True))
    await controller.tick()
    await interval(controller, clock, traffic)
    assert alias_version(sessions) == "v2"
    await controller.tick()
    assert view(sessions, rid)["state"] == "succeeded"


async def test_pending_waits_for_a_ready_candidate_backend_then_times_out(
        sessions, controller, clock):
    with sessions.begin() as s:
        for backend in q.list_backends(s, MODEL):
            if backend.version.label == "v2":
                q.set_backend_state(s, backend.id, "starting")
    rid = start(sessions, clock, steps=[{"weight": 0.1}], start_timeout_s=100)
    await controller.tick()
    assert view(sessions, rid)["state"] == "pending"
    clock.advance(100)
    await controller.tick()
    r = view(sessions, rid)
    assert r["state"] == "aborting" and "no ready backend of version 'v2'" in r["reason"]


async def test_spent_error_budget_pauses_unless_forced(sessions, controller, clock, traffic,
                                                       exported):
    with sessions.begin() as s:
        s.add(Slo(model_id=q.get_model(s, MODEL).id, name="availability",
                  metric="availability", objective=0.99, window_s=3600))
    rid = start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0}])
    traffic.send("v1", 95)
    traffic.send("v1", 5, code="500")  # 5% bad against a 1% allowance: budget overspent
    await controller.tick()
    r = view(sessions, rid)
    assert r["state"] == "paused" and "SLO 'availability'" in r["reason"]
    remaining = exported.get_sample_value(Metric.SLO_ERROR_BUDGET_REMAINING,
                                          {"model": "chat", "slo": "availability"})
    assert abs(remaining - (-4.0)) < 1e-9  # 5 bad where 1 was allowed

    forced = start_forced_after_abort(sessions, clock, rid)
    await controller.tick()
    assert view(sessions, forced)["state"] == "progressing"


def start_forced_after_abort(sessions, clock, rid: int) -> int:
    with sessions.begin() as s:
        rollout = store.load(s, rid)
        t.abort(s, rollout, "test", clock())
        t.finish(s, rollout, "test", clock())
    return start(sessions, clock, steps=[{"weight": 0.1, "pause_s": 0}], force=True)


async def test_run_drives_rollouts_as_a_background_task(sessions, traffic):
    changed = asyncio.Event()
    ctl = RolloutController(sessions, RegistryMetricsSource(traffic.metrics.registry),
                            changed.set, tick_s=0.05)
    rid = start(sessions, lambda: 0.0, steps=[{"weight": 0.5}], warm_delay_s=0)
    task = asyncio.create_task(ctl.run())
    try:
        for _ in range(100):
            if view(sessions, rid)["state"] == "succeeded":
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert view(sessions, rid)["state"] == "succeeded" and changed.is_set()
    assert alias_version(sessions) == "v2"


async def test_a_rollout_on_another_alias_splits_only_that_alias(
        sessions, controller, clock, traffic):
    with sessions.begin() as s:
        q.set_alias(s, q.get_model(s, MODEL), "prod", "v1", "test")
    rid = start(sessions, clock, alias="prod", steps=[{"weight": 0.2, "pause_s": 60}],
                analysis=ANALYSIS, warm_delay_s=0)
    await controller.tick()
    with sessions() as s:
        snapshot = build_snapshot(s)
    prod_view, pinned = snapshot.resolve(f"{MODEL}:prod")
    assert pinned is None and prod_view.splits == (SplitView("v1", 0.8), SplitView("v2", 0.2))
    plain_view, _ = snapshot.resolve(MODEL)
    assert plain_view.splits == (SplitView("v1", 1.0),)  # plain names follow 'default'
    assert snapshot.resolve(f"{MODEL}:default") == (plain_view, "v1")

    await controller.tick()  # baseline scrape
    # the gateway labels this traffic with the requested name, alias included
    traffic.send("v1", 40, model=f"{MODEL}:prod")
    traffic.send("v2", 40, model=f"{MODEL}:prod")
    clock.advance(60)
    await controller.tick()
    r = view(sessions, rid)
    assert r["measurements"][0]["result"]["candidate_requests"] == 40
    assert r["state"] in ("promoting", "succeeded")
    with sessions() as s:
        model = q.get_model(s, MODEL)
        assert q.get_alias(s, model, "prod").version.label == "v2"
        assert q.get_alias(s, model, "default").version.label == "v1"

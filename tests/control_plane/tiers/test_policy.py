"""Warm/cold moves by request rate: two thresholds, a minimum dwell time, the engine budget.
The decision table alone, then TierManager.tick over a real migrated SQLite registry."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from control_plane.supervisor import EngineProcess, EngineSpec, EngineSupervisor
from control_plane.tiers import TierConfig, TierManager, decide_tier
from registry.orm.catalog import Backend, Model
from tests.control_plane.tiers.conftest import add_model

LIMITS = dict(promote_rps=1.0, demote_rps=0.2, min_dwell_s=30.0)


@pytest.mark.parametrize("tier,rate,dwell,room,target", [
    ("cold", 1.0, 30.0, True, "warm"),      # at the promote threshold, dwelled long enough
    ("cold", 0.99, 300.0, True, None),      # just under it
    ("cold", 5.0, 29.9, True, None),        # too soon after the last move
    ("cold", 5.0, 300.0, False, None),      # no engine budget left
    ("warm", 0.2, 30.0, True, "cold"),      # at the demote threshold
    ("warm", 0.5, 300.0, True, None),       # between the thresholds: stays
    ("warm", 0.0, 10.0, True, None),        # too soon
    ("hot", 0.0, 1e6, True, None),          # pinned
    ("hot", 50.0, 1e6, True, None),
])
def test_decision_table(tier, rate, dwell, room, target):
    decision = decide_tier("m", tier, rate, dwell, engine_room=room, **LIMITS)
    assert (decision.target if decision else None) == target


def test_decide_rejects_thresholds_without_a_gap():
    with pytest.raises(ValueError, match="hysteresis"):
        TierConfig(promote_rps=1.0, demote_rps=1.0)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _tiers(sessions) -> dict[str, str]:
    with sessions() as s:
        return dict(s.execute(select(Model.name, Model.tier)).all())


async def test_hysteresis_over_sqlite(sessions):
    for name, tier in (("busy", "cold"), ("fading", "warm"), ("pinned", "hot")):
        add_model(sessions, name, tier)
    with sessions.begin() as s:  # a backend row follows its model's tier label
        busy = s.scalar(select(Model).where(Model.name == "busy"))
        s.add(Backend(model_id=busy.id, url="http://127.0.0.1:9/v1", tier="cold", state="ready"))
    changes: list[int] = []
    clock = Clock()
    config = TierConfig(rate_window_s=10.0, max_engines=4, **LIMITS)
    manager = TierManager(sessions, EngineSupervisor(), lambda: changes.append(1), config, clock)

    async def at(t: float, requests: dict[str, int] | None = None) -> dict[str, str]:
        clock.now = 1000.0 + t
        for model, n in (requests or {}).items():
            manager.note_request(model, n)
        await manager.tick()
        return _tiers(sessions)

    assert await at(0) == {"busy": "cold", "fading": "warm", "pinned": "hot"}
    # 2 req/s but no dwell yet: nothing moves (fading is idle but also just observed).
    assert (await at(5, {"busy": 20, "pinned": 100}))["busy"] == "cold"
    tiers = await at(31, {"busy": 20, "pinned": 100})
    assert tiers == {"busy": "warm", "fading": "cold", "pinned": "hot"}
    with sessions() as s:
        assert s.scalar(select(Backend.tier)) == "warm"
    assert len(changes) == 2
    # Idle right after the promotion: the dwell time holds it warm.
    assert (await at(45))["busy"] == "warm"
    # 0.5 req/s is between the thresholds: still warm after the dwell time.
    assert (await at(70, {"busy": 5}))["busy"] == "warm"
    # Traffic gone (window empty) and dwelled: demoted.
    assert (await at(81))["busy"] == "cold"
    assert _tiers(sessions)["pinned"] == "hot" and len(changes) == 3


async def test_promotion_waits_for_engine_budget(sessions):
    add_model(sessions, "eager", "cold")
    add_model(sessions, "occupant", "hot")
    clock = Clock()
    supervisor = EngineSupervisor()
    # A registered (not launched) engine of a hot model fills the budget of one.
    other = EngineSpec(name="occupant", model="x", port=9)
    supervisor.processes["occupant:9"] = EngineProcess(other)
    manager = TierManager(sessions, supervisor, lambda: None,
                          TierConfig(rate_window_s=10.0, max_engines=1, **LIMITS), clock)
    await manager.tick()
    clock.now += 40
    manager.note_request("eager", 50)
    await manager.tick()
    assert _tiers(sessions)["eager"] == "cold"
    supervisor.processes.clear()
    await manager.tick()
    assert _tiers(sessions)["eager"] == "warm"

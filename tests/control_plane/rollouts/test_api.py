"""/admin/v1/rollouts over HTTP (ASGI) on a migrated SQLite registry: validation, RBAC,
error budgets and the operator actions."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import generate_latest
from sqlalchemy import select

from control_plane.rollouts.metrics_source import parse_metrics
from control_plane.slo import SloTracker
from registry import queries as q
from registry.orm.audit import AuditLog
from registry.orm.slos import Slo
from registry.queries import get_snapshot_version
from tests.control_plane.conftest import build_admin_app
from tests.control_plane.rollouts.conftest import MODEL, Clock, Traffic, seed

URL = "/admin/v1/rollouts"
CANARY = {"model": MODEL, "candidate_version": "v2",
          "steps": [{"weight": 0.1, "pause_s": 30}, {"weight": 0.5, "pause_s": 30}]}


class Api:
    def __init__(self, client, keys, sessions, source, slo):
        self.client, self.keys, self.sessions, self.source, self.slo = \
            client, keys, sessions, source, slo

    def auth(self, role: str = "operator") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}

    async def post(self, path: str, body=None, role: str = "operator") -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.auth(role))


@pytest.fixture
async def api(sqlite_url):
    trackers = []
    app, sessions, source, keys = build_admin_app(
        sqlite_url, lambda s: trackers.append(SloTracker(s, clock=Clock())) or trackers[0])
    slo = trackers[0]
    seed(sessions)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield Api(client, keys, sessions, source, slo)
    sessions.kw["bind"].dispose()


async def test_create_shows_the_rollout_audits_and_bumps_the_snapshot(api):
    before = api.source.current.version
    r = await api.post(URL, CANARY)
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["state"], body["step"], body["weight"], body["steps"]) == ("pending", 0, 0.0, 2)
    assert (body["stable_version"], body["candidate_version"]) == ("v1", "v2")
    assert body["measurements"] == [] and body["events"][0]["kind"] == "pending"
    assert api.source.current.version > before
    with api.sessions() as s:
        entry = s.scalars(select(AuditLog).where(AuditLog.action == "create_rollout")).one()
        assert entry.resource_id == str(body["id"]) and "operator-key" in entry.actor
        assert get_snapshot_version(s) == api.source.current.version

    listed = (await api.client.get(URL, headers=api.auth(), params={"model": MODEL})).json()
    assert [x["id"] for x in listed["data"]] == [body["id"]]
    for state, total in (("pending", 1), ("progressing", 0)):
        r = await api.client.get(URL, headers=api.auth(), params={"state": state})
        assert r.json()["total"] == total
    r = await api.client.get(URL, headers=api.auth(), params={"state": "running"})
    assert r.status_code == 400 and "state must be one of pending" in r.json()["error"]["message"]
    one = await api.client.get(f"{URL}/{body['id']}", headers=api.auth())
    assert one.json()["spec"]["steps"][1] == {"weight": 0.5, "pause_s": 30.0}


@pytest.mark.parametrize("change, status, param, text", [
    ({"steps": [{"weight": 10}]}, 422, "steps.0.weight", "fraction in (0, 1]"),
    ({"steps": [{"weight": 0}]}, 422, "steps.0.weight", "fraction in (0, 1]"),
    ({"steps": [{"weight": 0.5}, {"weight": 0.2}]}, 422, None, "must not decrease"),
    ({"steps": []}, 422, None, "needs at least one step"),
    ({"strategy": "blue_green"}, 422, None, "at most one step"),
    ({"strategy": "linear"}, 422, "strategy", "canary"),
    ({"steps": [{"weight": 0.1, "pause": 3}]}, 422, "steps.0.pause", "Extra inputs"),
    ({"analysis": {"max_error_rate": 5}}, 422, "analysis.max_error_rate", "fraction"),
    ({"analysis": {"max_inconclusive": -1}}, 422, "analysis.max_inconclusive",
     "greater than or equal to 0"),
    ({"candidate_version": "v9"}, 422, "candidate_version", "has no version 'v9' (known: v1, v2)"),
    ({"candidate_version": "v1"}, 422, "candidate_version", "already serves version 'v1'"),
    ({"alias": "prod"}, 422, "alias", "has no alias 'prod'"),
    ({"model": "nope"}, 404, "model", "model 'nope' does not exist"),
])
async def test_bad_rollouts_are_refused_precisely(api, change, status, param, text):
    r = await api.post(URL, {**CANARY, **change})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and text in error["message"]
    listed = (await api.client.get(URL, headers=api.auth())).json()
    assert listed["total"] == 0


async def test_rbac_users_and_anonymous_cannot_touch_rollouts(api):
    assert (await api.client.post(URL, json=CANARY)).status_code == 401
    assert (await api.post(URL, CANARY, role="user")).status_code == 403
    assert (await api.client.get(URL, headers=api.auth("user"))).status_code == 403
    assert (await api.post(URL, CANARY, role="admin")).status_code == 201
    assert (await api.post(f"{URL}/1/abort", role="user")).status_code == 403


async def test_one_rollout_per_model(api):
    first = (await api.post(URL, CANARY)).json()
    r = await api.post(URL, CANARY)
    assert r.status_code == 409
    assert f"already has rollout {first['id']} (pending)" in r.json()["error"]["message"]


async def test_operator_actions_follow_the_state_machine(api):
    rid = (await api.post(URL, CANARY)).json()["id"]
    assert (await api.post(f"{URL}/{rid}/resume")).status_code == 409
    paused = (await api.post(f"{URL}/{rid}/pause")).json()
    assert paused["state"] == "paused" and paused["reason"] == "pause by operator-key"
    resumed = (await api.post(f"{URL}/{rid}/resume", {"force": True})).json()
    assert resumed["state"] == "pending" and resumed["force"] is True

    promoted = (await api.post(f"{URL}/{rid}/promote")).json()
    assert promoted["state"] == "promoting" and promoted["weight"] == 1.0
    assert api.source.current.models[MODEL].aliases["default"] == "v2"  # the swap is live
    r = await api.post(f"{URL}/{rid}/abort")
    assert r.status_code == 409 and "is promoting" in r.json()["error"]["message"]
    assert (await api.post(f"{URL}/999/abort")).status_code == 404


async def test_abort_zeroes_the_canary_and_keeps_the_alias(api):
    rid = (await api.post(URL, CANARY)).json()["id"]
    aborted = (await api.post(f"{URL}/{rid}/abort")).json()
    assert aborted["state"] == "aborting" and aborted["weight"] == 0.0
    view = api.source.current.models[MODEL]
    assert view.aliases["default"] == "v1"
    assert {s.version: s.weight for s in view.splits} in ({"v1": 1.0, "v2": 0.0}, {"v1": 1.0})
    with api.sessions() as s:
        actions = list(s.scalars(select(AuditLog.action).where(
            AuditLog.resource_type == "rollout").order_by(AuditLog.id)))
    assert actions == ["create_rollout", "abort_rollout"]


async def test_spent_error_budget_refuses_to_start_unless_forced(api):
    with api.sessions.begin() as s:
        s.add(Slo(model_id=q.get_model(s, MODEL).id, name="ttft-p95", metric="ttft",
                  objective=0.95, threshold_ms=500, window_s=3600))
    traffic = Traffic()
    traffic.send("v1", 80, ttft_s=0.2)
    traffic.send("v1", 20, ttft_s=2.0)  # 20% slower than 500 ms against a 5% allowance
    api.slo.observe(parse_metrics(generate_latest(traffic.metrics.registry).decode()))

    r = await api.post(URL, CANARY)
    assert r.status_code == 409, r.text
    message = r.json()["error"]["message"]
    assert "SLO 'ttft-p95'" in message and "-300.0% of its error budget left" in message
    assert "pass \"force\": true" in message
    budget = await api.client.get(f"/admin/v1/models/{MODEL}/error-budget", headers=api.auth())
    [status] = budget.json()["data"]
    assert (status["slo"], status["total"], status["bad"]) == ("ttft-p95", 100, 20)
    assert status["remaining"] < 0
    assert (await api.post(URL, {**CANARY, "force": True})).status_code == 201


async def test_rollouts_on_other_aliases_are_accepted(api):
    with api.sessions.begin() as s:
        q.set_alias(s, q.get_model(s, MODEL), "prod", "v1", "test")
    r = await api.post(URL, {**CANARY, "alias": "prod"})
    assert r.status_code == 201, r.text
    assert r.json()["alias"] == "prod"

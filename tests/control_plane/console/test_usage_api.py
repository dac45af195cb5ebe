"""GET /admin/v1/usage and /admin/v1/requests on real databases, fed through the real usage
sink (per-minute buckets, hourly rollup and request log written in one transaction)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from common.usage_record import UsageRecord
from control_plane.usage_sink import sql_usage_writer
from registry import queries as q
from registry.orm.usage import UsageDaily, UsageHourly
from registry.usage_rollup import rebuild_rollups

# Two days ago at 10:00 UTC: inside the request log's retention, and on a day boundary we know.
DAY0 = (datetime.now(timezone.utc) - timedelta(days=2)).replace(hour=0, minute=0, second=0,
                                                                 microsecond=0)
T0 = (DAY0 + timedelta(hours=10)).timestamp()


def at(hours: float = 0, days: int = 0) -> str:
    return (DAY0 + timedelta(days=days, hours=hours)).isoformat()


def day(n: int) -> str:
    return (DAY0 + timedelta(days=n)).date().isoformat()


def rec(minutes: float, model="m1", team="red", key_id="1", cost=0.5, status="ok", **kw):
    return UsageRecord(request_id=f"r{minutes}-{model}", key_id=key_id, team=team, model=model,
                       version="v1", backend="7", prompt_tokens=10, completion_tokens=5,
                       cost_usd=cost, latency_ms=120.0, ttft_ms=30.0, status=status,
                       http_status=200 if status == "ok" else 502, created_at=T0 + minutes * 60,
                       trace_id="ab" * 16, **kw)


@pytest.fixture
async def fed(env_any):
    env = env_any
    with env.sessions.begin() as s:
        q.create_team(s, "red")
        key, _ = q.create_key(s, "k", team="red")
    key_id = str(key.id)
    batch = [rec(0, key_id=key_id), rec(30, key_id=key_id), rec(61, key_id=key_id),
             rec(60 * 24, model="m2", key_id=key_id, status="error"),
             rec(60 * 24 + 59.5, model="m2", team=None, key_id=None, cost=0.25)]
    sql_usage_writer(env.sessions).sink(batch)
    env.key_id = key.id
    return env


def get(env, path, role="operator", **params):
    return env.client.get(path, params=params, headers=env.auth(role))


async def test_totals_and_groups_over_a_range(fed):
    r = await get(fed, "/admin/v1/usage", group_by="model,day", since=at(days=-20),
                  until=at(days=10))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["totals"]["requests"] == 5 and body["totals"]["errors"] == 1
    assert body["totals"]["cost"] == pytest.approx(2.25)
    rows = {(d["model"], d["day"]): d for d in body["data"]}
    assert set(rows) == {("m1", day(0)), ("m2", day(1))}
    assert rows[("m1", day(0))]["requests"] == 3
    assert rows[("m1", day(0))]["prompt_tokens"] == 30 and "team" not in rows[("m1", day(0))]
    by_team = (await get(fed, "/admin/v1/usage", group_by="team", since=at(days=-20),
                         until=at(days=10))).json()["data"]
    assert {(d["team"], d["requests"]) for d in by_team} == {("red", 4), (None, 1)}


async def test_hourly_groups_over_a_ragged_range(fed):
    r = await get(fed, "/admin/v1/usage", group_by="hour,model", since=at(10.25),
                  until=at(11, days=1))
    hours = {(d["hour"], d["model"]): d["requests"] for d in r.json()["data"]}
    stamp = lambda h, d=0: (DAY0 + timedelta(days=d, hours=h)).strftime("%Y-%m-%d %H:00")
    assert hours == {(stamp(10), "m1"): 1, (stamp(11), "m1"): 1, (stamp(10, 1), "m2"): 2}


async def test_ragged_ranges_read_minute_buckets_at_the_ends(fed):
    # 10:30..11:01 inclusive of the 10:30 and 11:01 buckets, exclusive of 10:00.
    r = await get(fed, "/admin/v1/usage", group_by="key", since=at(10.25),
                  until=at(11 + 2 / 60))
    assert r.json()["totals"]["requests"] == 2
    whole_day = await get(fed, "/admin/v1/usage", since=at(days=1),
                          until=at(days=2), model="m2")
    assert whole_day.json()["totals"]["requests"] == 2
    assert whole_day.json()["data"] == [whole_day.json()["totals"]]
    narrow = await get(fed, "/admin/v1/usage", since=at(10 + 59 / 60, days=1),
                       until=at(11, days=1))
    assert narrow.json()["totals"]["requests"] == 1 and narrow.json()["totals"]["cost"] == 0.25


async def test_rollups_match_a_rebuild_from_minute_buckets(fed):
    def rows():
        with fed.sessions() as s:
            return {t.__tablename__: sorted((r.start.replace(tzinfo=None), r.key_id or 0, r.model,
                                             r.requests, r.cost) for r in s.query(t))
                    for t in (UsageHourly, UsageDaily)}
    written = rows()
    with fed.sessions.begin() as s:
        assert rebuild_rollups(s) == {"usage_hourly": 4, "usage_daily": 3}
    assert rows() == written
    assert [r[0].hour for r in written["usage_daily"]] == [0, 0, 0]


@pytest.mark.parametrize("params, param", [
    ({"group_by": "team,colour"}, "group_by"), ({"group_by": "team,team"}, "group_by"),
    ({"group_by": "day,hour"}, "group_by"),
    ({"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "since"),  # reversed
    ({"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
    ({"since": "yesterday"}, None), ({"key_id": "0"}, None),
])
async def test_bad_queries_are_precise_400s(env, params, param):
    r = await get(env, "/admin/v1/usage", **params)
    assert r.status_code in (400, 422), r.text
    if param:
        assert r.json()["error"]["param"] == param


async def test_users_may_not_read_usage_or_requests(env):
    for path in ("/admin/v1/usage", "/admin/v1/requests"):
        assert (await get(env, path, role="user")).status_code == 403
        assert (await env.client.get(path)).status_code == 401


async def test_requests_newest_first_filtered_and_paged(fed):
    r = await get(fed, "/admin/v1/requests", limit=2)
    body = r.json()
    assert r.status_code == 200 and body["has_more"] and len(body["data"]) == 2, body
    assert [d["model"] for d in body["data"]] == ["m2", "m2"]
    first = body["data"][0]
    assert first["latency_ms"] == 120.0 and first["ttft_ms"] == 30.0 and first["backend"] == "7"
    assert first["trace_id"] == "ab" * 16 and first["key_id"] is None
    rest = (await get(fed, "/admin/v1/requests", cursor=body["next_cursor"])).json()
    assert len(rest["data"]) == 3 and not rest["has_more"]
    errors = (await get(fed, "/admin/v1/requests", status="error")).json()["data"]
    assert [(e["http_status"], e["key_id"]) for e in errors] == [(502, fed.key_id)]
    assert (await get(fed, "/admin/v1/requests", status="weird")).status_code in (400, 422)


async def test_whoami_names_the_role_for_every_role(env):
    for role in ("admin", "operator", "user"):
        r = await get(env, "/admin/v1/whoami", role=role)
        assert r.status_code == 200 and r.json()["role"] == role
    assert (await env.client.get("/admin/v1/whoami")).status_code == 401


async def test_backend_status_needs_a_gateway_in_the_process(env):
    # The admin app here has no gateway router; `inferplane up` has (the browser tests).
    r = await get(env, "/admin/v1/backend-status")
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_gateway"
    assert (await get(env, "/admin/v1/backend-status", role="user")).status_code == 403


def test_hours_and_days_are_utc_whatever_the_session_time_zone(pg_url):
    """India is UTC+5:30: a local-time hour or day would land half an hour or a day off."""
    from control_plane.admin.usage import usage_report
    from registry.db import make_session_factory
    from registry.migrate import upgrade
    from registry.orm.usage import Usage
    upgrade(pg_url, progress=None)
    sessions = make_session_factory(pg_url, connect_args={"options": "-c timezone=Asia/Kolkata"})
    late = datetime(2026, 11, 3, 23, 50, tzinfo=timezone.utc)
    with sessions.begin() as s:
        s.add(Usage(bucket_start=late, key_id=None, team="t", model="m", requests=2, errors=0,
                    prompt_tokens=1, completion_tokens=1, cached_tokens=0, cost=0.0))
        s.flush()
        rebuild_rollups(s)
    with sessions() as s:
        hour = s.query(UsageHourly).one().start
        day = s.query(UsageDaily).one().start
        report = usage_report(s, late - timedelta(days=1), late + timedelta(days=1), ["day"], {})
    sessions.kw["bind"].dispose()
    assert hour == datetime(2026, 11, 3, 23, 0, tzinfo=timezone.utc)
    assert day == datetime(2026, 11, 3, tzinfo=timezone.utc)
    assert [(d["day"], d["requests"]) for d in report["data"]] == [("2026-11-03", 2)]

"""build_snapshot: the frozen routing view, including version splits from rollouts."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from common.auth.keys import hash_key
from registry import queries as q
from registry.db import make_session_factory
from registry.orm.rollouts import Rollout
from registry.snapshot import RoutingSnapshot, SplitView, build_snapshot


@pytest.fixture
def sessions(migrated_sqlite_url):
    factory = make_session_factory(migrated_sqlite_url)
    yield factory
    factory.kw["bind"].dispose()


def seed(sessions) -> str:
    with sessions.begin() as s:
        model = q.create_model(s, "chat", context_length=8192, fallbacks=[], tier="hot",
                               price_in_per_1k=0.1, price_out_per_1k=0.2)
        q.add_version(s, model, "v1")
        q.add_version(s, model, "v2")
        q.set_alias(s, model, "default", "v1", "t")
        q.set_alias(s, model, "canary", "v2", "t")
        b1 = q.add_backend(s, "chat", "http://127.0.0.1:9001/v1", version="v1", gpu_type="H200",
                           weight=2.0)
        q.add_backend(s, "chat", "http://127.0.0.1:9002/v1", version="v2", state="ready")
        q.attach_adapter(s, b1, q.add_adapter(s, model, "sql", base_version="v1"))
        q.create_team(s, "ml", rpm_limit=100)
        _, secret = q.create_key(s, "k", team="ml", models=["chat"], rpm_limit=5,
                                 expires_at=datetime(2030, 1, 1, tzinfo=timezone.utc))
        q.bump_snapshot_version(s)
    return secret


def test_snapshot_views(sessions):
    secret = seed(sessions)
    with sessions() as s:
        snap = build_snapshot(s)
    assert snap.version == 1
    chat = snap.models["chat"]
    assert (chat.context_length, chat.tier, chat.price_out_per_1k) == (8192, "hot", 0.2)
    assert chat.splits == (SplitView("v1", 1.0),)
    assert dict(chat.aliases) == {"default": "v1", "canary": "v2"}
    b1, b2 = chat.backends
    assert (b1.url, b1.gpu, b1.weight, b1.adapters, b1.version, b1.state) == (
        "http://127.0.0.1:9001/v1", "H200", 2.0, ("sql",), "v1", "starting")
    assert chat.backends_for("v2") == (b2,)
    key = snap.keys[hash_key(secret)]
    assert (key.team, key.models, key.rpm_limit, key.revoked) == ("ml", ("chat",), 5, False)
    assert key.expires_at == datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()
    assert snap.teams["ml"].rpm_limit == 100
    assert snap.resolve("chat") == (chat, None)
    assert snap.resolve("chat:canary") == (chat, "v2")
    assert snap.resolve("chat:nope") is None and snap.resolve("other") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.models["x"] = chat  # type: ignore[index]


@pytest.mark.parametrize("mode, weight, expected", [
    ("canary", 0.25, (SplitView("v1", 0.75), SplitView("v2", 0.25))),
    ("shadow", 0.5, (SplitView("v1", 1.0), SplitView("v2", 0.5, shadow=True))),
])
def test_active_rollout_splits_traffic(sessions, mode, weight, expected):
    seed(sessions)
    with sessions.begin() as s:
        model = q.get_model(s, "chat")
        v1, v2 = q.get_version(s, model, "v1"), q.get_version(s, model, "v2")
        s.add(Rollout(model_id=model.id, from_version_id=v1.id, to_version_id=v2.id,
                      spec={"mode": mode}, state="running", weight=weight))
    with sessions() as s:
        assert build_snapshot(s).models["chat"].splits == expected


def test_finished_rollouts_do_not_split(sessions):
    seed(sessions)
    with sessions.begin() as s:
        model = q.get_model(s, "chat")
        v2 = q.get_version(s, model, "v2")
        s.add(Rollout(model_id=model.id, to_version_id=v2.id, state="promoted", weight=1.0))
    with sessions() as s:
        assert build_snapshot(s).models["chat"].splits == (SplitView("v1", 1.0),)


def test_empty_snapshot():
    snap = RoutingSnapshot.empty()
    assert (snap.version, dict(snap.models), dict(snap.keys)) == (0, {}, {})
    assert snap.resolve("anything") is None

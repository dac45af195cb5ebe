"""Registry queries against a migrated SQLite database."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from common.auth.keys import generate_key, hash_key
from registry import queries as q
from registry.access_queries import UsageRecord
from registry.db import make_session_factory
from registry.errors import ConflictError, InvalidError, NotFoundError
from registry.orm.access import ApiKey, Team
from registry.orm.audit import AuditLog
from registry.orm.catalog import AliasHistory
from registry.orm.usage import Usage


@pytest.fixture
def sessions(migrated_sqlite_url):
    factory = make_session_factory(migrated_sqlite_url)
    yield factory
    factory.kw["bind"].dispose()


def test_generated_keys_are_unique_prefixed_and_hashed_with_sha256():
    a, b = generate_key(), generate_key()
    assert a != b and a.startswith("ip-") and len(a) > 40
    assert hash_key(a) == "%064x" % int(hash_key(a), 16) and hash_key(a) != hash_key(b)
    assert hash_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_create_key_stores_only_the_hash(sessions):
    with sessions.begin() as s:
        row, secret = q.create_key(s, "ci", role="operator", team="ml", models=["a"])
    with sessions() as s:
        stored = s.get(ApiKey, row.id)
        assert stored.key_hash == hash_key(secret)
        assert secret not in {stored.key_hash, stored.prefix, stored.name}
        assert secret.startswith(stored.prefix) and stored.models == ["a"]


def test_imported_secret_is_checked(sessions):
    with sessions.begin() as s:
        q.create_key(s, "one", secret="ip-known-secret-value-123")
    with sessions.begin() as s, pytest.raises(ConflictError):
        q.create_key(s, "two", secret="ip-known-secret-value-123")
    with sessions.begin() as s, pytest.raises(InvalidError) as err:
        q.create_key(s, "short", secret="abc")
    assert err.value.param == "secret"


def test_rotate_replaces_the_hash_and_revoked_keys_cannot_rotate(sessions):
    with sessions.begin() as s:
        row, old = q.create_key(s, "k")
        _, new = q.rotate_key(s, row.id)
        assert row.key_hash == hash_key(new) != hash_key(old)
        q.revoke_key(s, row.id)
        assert row.revoked_at is not None
        with pytest.raises(ConflictError):
            q.rotate_key(s, row.id)
    with sessions() as s, pytest.raises(NotFoundError):
        q.get_key(s, 9999)


def test_versions_aliases_and_history(sessions):
    with sessions.begin() as s:
        model = q.create_model(s, "m1")
        q.add_version(s, model, "v1")
        q.add_version(s, model, "v2")
        with pytest.raises(InvalidError, match="base_version"):
            q.add_version(s, model, "l1", kind="lora")
        with pytest.raises(InvalidError, match="no version 'nope'"):
            q.add_version(s, model, "l1", kind="lora", base_version="nope")
        q.add_version(s, model, "l1", kind="lora", base_version="v1")
        with pytest.raises(ConflictError):
            q.add_version(s, model, "v1")

        alias, previous, created = q.set_alias(s, model, "default", "v1", "alice")
        assert (previous, created, alias.row_version) == (None, True, 1)
        alias, previous, created = q.set_alias(s, model, "default", "v2", "bob",
                                               expected_row_version=1)
        assert (previous, created, alias.row_version, alias.version.label) == ("v1", False, 2, "v2")
        with pytest.raises(ConflictError, match="row_version is 2"):
            q.set_alias(s, model, "default", "v1", "carol", expected_row_version=1)
        with pytest.raises(ConflictError):
            q.set_alias(s, model, "default", "v1", "carol", expected_row_version=0)
        with pytest.raises(NotFoundError):
            q.set_alias(s, model, "default", "v9", "carol")
    with sessions() as s:
        history = s.scalars(select(AliasHistory).order_by(AliasHistory.id)).all()
        assert [(h.old_version, h.new_version, h.actor) for h in history] == [
            (None, "v1", "alice"), ("v1", "v2", "bob")]


def test_backends_states_and_adapters(sessions):
    with sessions.begin() as s:
        model = q.create_model(s, "m1")
        q.add_version(s, model, "v1")
        backend = q.add_backend(s, "m1", "http://127.0.0.1:9000/v1", version="v1")
        assert backend.served_model == "m1" and backend.state == "starting"
        with pytest.raises(ConflictError):
            q.add_backend(s, "m1", "http://127.0.0.1:9000/v1")
        _, changed = q.set_backend_state(s, backend.id, "ready")
        _, again = q.set_backend_state(s, backend.id, "ready")
        assert (changed, again) == (True, False)
        adapter = q.add_adapter(s, model, "sql", base_version="v1")
        assert q.attach_adapter(s, backend, adapter) is True
        assert q.attach_adapter(s, backend, adapter) is False
        assert [a.name for a in backend.adapters] == ["sql"]
        other = q.create_model(s, "m2")
        foreign = q.add_adapter(s, other, "x")
        with pytest.raises(InvalidError):
            q.attach_adapter(s, backend, foreign)
        assert q.detach_adapter(s, backend, adapter) is True
        assert backend.adapters == []
        assert [b.id for b in q.list_backends(s, "m1", "ready")] == [backend.id]


def test_snapshot_version_bumps_and_audit(sessions):
    with sessions() as s:
        assert q.get_snapshot_version(s) == 0
    with sessions.begin() as s:
        assert q.bump_snapshot_version(s) == 1
        assert q.bump_snapshot_version(s) == 2
        q.audit(s, "alice", "create", "model", "m1", after={"name": "m1"})
    with sessions() as s:
        entry = s.scalars(select(AuditLog)).one()
        assert (entry.actor, entry.resource_id, entry.after) == ("alice", "m1", {"name": "m1"})
        assert q.get_snapshot_version(s) == 2


def test_usage_batches_accumulate_and_charge_spend(sessions):
    bucket = datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)
    with sessions.begin() as s:
        key, _ = q.create_key(s, "k", team="ml")
        q.create_team(s, "ml")
    batch = [UsageRecord(bucket, key.id, "ml", "m1", requests=1, prompt_tokens=10,
                         completion_tokens=5, cost=0.25)] * 2
    with sessions.begin() as s:
        assert q.record_usage(s, batch) == 2
    with sessions() as s:
        row = s.scalars(select(Usage)).one()
        assert (row.requests, row.prompt_tokens, row.completion_tokens) == (2, 20, 10)
        assert s.get(ApiKey, key.id).spend == pytest.approx(0.5)
        assert s.scalar(select(Team.spend).where(Team.name == "ml")) == pytest.approx(0.5)


def test_stale_write_loses_at_the_database(any_url):
    """Two transactions that read the same row version: the second UPDATE matches no row."""
    from sqlalchemy.orm.exc import StaleDataError

    from registry.migrate import upgrade

    upgrade(any_url, progress=None)
    factory = make_session_factory(any_url)
    with factory.begin() as s:
        model = q.create_model(s, "m")
        q.add_version(s, model, "v1")
        q.add_version(s, model, "v2")
        q.set_alias(s, model, "prod", "v1", "t")
    first, second = factory(), factory()
    try:
        a = q.get_alias(first, q.get_model(first, "m"), "prod")
        b = q.get_alias(second, q.get_model(second, "m"), "prod")
        assert a.row_version == b.row_version == 1
        a.version_id = b.version_id + 1
        first.commit()
        b.version_id = b.version_id + 1
        with pytest.raises(StaleDataError):
            second.commit()
    finally:
        first.close()
        second.close()
        factory.kw["bind"].dispose()

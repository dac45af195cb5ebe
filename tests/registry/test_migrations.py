"""Alembic migrations on SQLite and PostgreSQL: upgrade, downgrade, and no drift from the ORM."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from registry.db import make_engine
from registry.migrate import VERSION_TABLE, current_revision, downgrade, head_revision, upgrade
from registry.orm import Base

REGISTRY_TABLES = set(Base.metadata.tables)


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_every_table_and_downgrade_removes_them(any_url):
    messages: list[str] = []
    assert upgrade(any_url, progress=messages.append) == head_revision()
    assert messages and "upgrading to head" in messages[0]
    assert REGISTRY_TABLES <= table_names(any_url)
    assert VERSION_TABLE in table_names(any_url)
    assert "alembic_version" not in table_names(any_url)  # our own version table only
    assert current_revision(any_url) == head_revision()

    engine = make_engine(any_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id, version FROM registry_state")).all() == [(1, 0)]
    engine.dispose()

    downgrade(any_url, "base")
    assert not (REGISTRY_TABLES & table_names(any_url))
    assert current_revision(any_url) is None

    upgrade(any_url, progress=None)  # and back up again from base
    assert REGISTRY_TABLES <= table_names(any_url)


def test_upgrade_is_idempotent(migrated_sqlite_url):
    assert upgrade(migrated_sqlite_url, progress=None) == head_revision()


def test_migrated_schema_matches_the_orm(any_url):
    upgrade(any_url, progress=None)
    engine = make_engine(any_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                         "version_table": VERSION_TABLE})
            diff = compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []

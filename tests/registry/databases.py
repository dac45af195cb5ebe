"""Real databases for registry tests: a migrated SQLite file, and a throw-away PostgreSQL
database created on the local server (dropped afterwards, even if the test failed)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from registry.migrate import upgrade

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def pg_admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def create_pg_database() -> tuple[str, str]:
    name = f"ip_test_{uuid.uuid4().hex[:12]}"
    pg_admin(f'CREATE DATABASE "{name}"')
    return name, f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_pg_database(name: str) -> None:
    pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url():
    """URL of an empty PostgreSQL database."""
    name, url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request, tmp_path):
    """An empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    name, url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def migrated_sqlite_url(sqlite_url):
    upgrade(sqlite_url, progress=None)
    return sqlite_url

"""Alembic environment: URL from the Config attribute or INFERPLANE_DATABASE_URL, a version
table of our own (so we can share a database with other Alembic users), batch mode on SQLite
(ALTER TABLE there needs a table rebuild)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from registry.db import make_engine, normalize_url
from registry.orm import Base

VERSION_TABLE = "inferplane_alembic_version"

config = context.config
target_metadata = Base.metadata


def database_url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    url = url or os.environ.get("INFERPLANE_DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: set INFERPLANE_DATABASE_URL or pass one to upgrade()")
    return normalize_url(url)


def configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,
        compare_type=True,
        literal_binds=connection is None,
    )


def run_offline() -> None:
    configure(url=database_url())
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(database_url())
    try:
        with engine.connect() as conn:
            configure(connection=conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

"""Programmatic Alembic: works from an installed package (no alembic.ini on disk needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import migrations
from registry.db import make_engine, normalize_url

VERSION_TABLE = "inferplane_alembic_version"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.attributes["url"] = normalize_url(url)
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head", progress: Callable[[str], None] | None = print) -> str:
    before = current_revision(url)
    if progress:
        progress(f"database at {before or 'empty'}, upgrading to {revision}")
    command.upgrade(alembic_config(url), revision)
    after = current_revision(url)
    if progress:
        progress(f"database now at {after}")
    return after or ""


def downgrade(url: str, revision: str = "base", progress: Callable[[str], None] | None = None) -> str:
    command.downgrade(alembic_config(url), revision)
    after = current_revision(url)
    if progress:
        progress(f"database now at {after or 'base'}")
    return after or ""

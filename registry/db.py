"""Engine and session factory for a database URL (SQLite embedded, PostgreSQL in production)."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 5000


def normalize_url(url: str) -> str:
    """Route plain postgres URLs to the psycopg 3 driver (psycopg2 is not a dependency)."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    return url


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets the snapshot poller read while the admin API writes; foreign keys are off by
    # default in SQLite and the schema relies on ON DELETE CASCADE.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str, **kwargs) -> Engine:
    url = normalize_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {}).setdefault("check_same_thread", False)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # Fail fast when the server is gone: callers keep serving their last snapshot meanwhile.
    kwargs.setdefault("connect_args", {}).setdefault("connect_timeout", 5)
    return create_engine(url, **kwargs)


def make_session_factory(url_or_engine: str | Engine, **kwargs) -> sessionmaker[Session]:
    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine, **kwargs)
    # expire_on_commit=False: rows are serialised to JSON after the commit that wrote them.
    return sessionmaker(engine, expire_on_commit=False)

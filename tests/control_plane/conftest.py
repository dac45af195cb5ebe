"""An admin API on a real, migrated database, with keys for each role."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from control_plane.admin import include_admin_routers
from control_plane.snapshots import SnapshotSource
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from tests.registry.databases import any_url, pg_url, sqlite_url  # noqa: F401


@dataclass
class AdminEnv:
    app: FastAPI
    client: httpx.AsyncClient
    sessions: object
    source: SnapshotSource
    keys: dict[str, str]  # role → secret

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}


def build_admin_app(url: str, make_slo=None) -> tuple[FastAPI, object, SnapshotSource, dict[str, str]]:
    """make_slo(sessions) builds the SloTracker that gates rollouts (none by default)."""
    upgrade(url, progress=None)
    sessions = make_session_factory(url)
    keys = {}
    with sessions.begin() as s:
        for role in ("admin", "operator", "user"):
            _, keys[role] = q.create_key(s, f"{role}-key", role=role)
        q.bump_snapshot_version(s)
    source = SnapshotSource(sessions)
    source.refresh()
    app = FastAPI()
    # authenticate() reads the snapshot source (and JWT config) from the gateway's app state.
    app.state.gateway = SimpleNamespace(snapshot_source=source, jwt=None, settings=None)
    include_admin_routers(app, sessions, source, make_slo(sessions) if make_slo else None)
    return app, sessions, source, keys


async def _env(url: str):
    app, sessions, source, keys = build_admin_app(url)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield AdminEnv(app, client, sessions, source, keys)
    sessions.kw["bind"].dispose()


@pytest.fixture
async def env(sqlite_url):
    async for e in _env(sqlite_url):
        yield e


@pytest.fixture
async def env_any(any_url):
    """The same admin API on SQLite and on PostgreSQL."""
    async for e in _env(any_url):
        yield e

"""An admin API on a real, migrated database, with keys for each role."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from control_plane.admin import include_admin_routers
from control_plane.snapshots import SnapshotSource
from gateway.app import create_gateway_app
from gateway.settings import GatewaySettings
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


def build_admin_app(url: str, make_slo=None, on_gateway: bool = False
                    ) -> tuple[FastAPI, object, SnapshotSource, dict[str, str]]:
    """make_slo(sessions) builds the SloTracker that gates rollouts (none by default).
    on_gateway: mount on the gateway's app as `inferplane up` does (orjson responses)."""
    upgrade(url, progress=None)
    sessions = make_session_factory(url)
    keys = {}
    with sessions.begin() as s:
        for role in ("admin", "operator", "user"):
            _, keys[role] = q.create_key(s, f"{role}-key", role=role)
        q.bump_snapshot_version(s)
    source = SnapshotSource(sessions)
    source.refresh()
    if on_gateway:
        app = create_gateway_app(GatewaySettings.model_validate(
            {"routing": {"load_poll_interval_s": 0}}), source)
    else:
        app = FastAPI()
        # authenticate() reads the snapshot source (and JWT config) from the gateway's state.
        app.state.gateway = SimpleNamespace(snapshot_source=source, jwt=None, settings=None)
    include_admin_routers(app, sessions, source, make_slo(sessions) if make_slo else None)
    return app, sessions, source, keys


async def _env(url: str, on_gateway: bool = False):
    app, sessions, source, keys = build_admin_app(url, on_gateway=on_gateway)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield AdminEnv(app, client, sessions, source, keys)
    sessions.kw["bind"].dispose()


@pytest.fixture
async def env(sqlite_url):
    async for e in _env(sqlite_url):
        yield e


@pytest.fixture
async def gateway_env(sqlite_url):
    """The admin API on the gateway's app, as `inferplane up` serves it."""
    async for e in _env(sqlite_url, on_gateway=True):
        yield e


@pytest.fixture
async def env_any(any_url):
    """The same admin API on SQLite and on PostgreSQL."""
    async for e in _env(any_url):
        yield e

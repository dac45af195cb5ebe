"""The two surfaces the fuzzer runs against, each a real server on a loopback port.

    admin = start_admin(db_url, port)     # gateway app + every /admin/v1 router, SQLite
    openai = start_openai(engine_url, port)  # gateway app in front of the fake engine

The admin app is built as `inferplane up` builds it, minus the fleet: no health prober and no
engine supervisor run, so nothing it registers is ever contacted, and the backend allowlist
admits loopback only. Used by the suite (tests/fuzz) and by `python -m tests.fuzz.long_run`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass

import uvicorn
from prometheus_client import CollectorRegistry

from common.auth.keys import hash_key
from control_plane.admin import include_admin_routers
from control_plane.backend_allowlist import BackendAllowlist
from control_plane.slo import SloTracker
from control_plane.snapshots import SnapshotSource
from control_plane.supervisor import EngineSupervisor
from control_plane.tiers import TierConfig, TierManager, build_tiers_router
from gateway.app import create_gateway_app
from gateway.settings import GatewaySettings
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot
from tests.conftest import ROOT
from tests.gateway.conftest import MutableSource, wait_http

LOOPBACK_ONLY = ["127.0.0.0/8", "::1/128"]
OPENAI_KEY = "ip-fuzz-user-secret-0123456789"


@dataclass
class Server:
    url: str
    server: uvicorn.Server
    thread: threading.Thread
    headers: dict[str, str]
    protected_key_id: int | None = None
    sessions: object = None

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _serve(app, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", loop="asyncio",
                            http="httptools", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True, name=f"fuzz-{port}")
    thread.start()
    wait_http(f"http://127.0.0.1:{port}/healthz")
    return server, thread


def _settings() -> GatewaySettings:
    return GatewaySettings.model_validate({"routing": {"load_poll_interval_s": 0}})


def _seed(sessions) -> tuple[int, str]:
    """The fuzzer's admin key, plus a model with two versions and an alias to find."""
    with sessions.begin() as s:
        key, secret = q.create_key(s, "fuzz-admin", role="admin")
        q.create_key(s, "fuzz-operator", role="operator")
        model = q.create_model(s, "m")
        q.add_version(s, model, "v1")
        q.add_version(s, model, "v2")
        q.set_alias(s, model, "default", "v1", "fuzz")
        q.create_team(s, "t")
        q.bump_snapshot_version(s)
    return key.id, secret


def start_admin(db_url: str, port: int) -> Server:
    upgrade(db_url, progress=None)
    sessions = make_session_factory(db_url)
    key_id, secret = _seed(sessions)
    source = SnapshotSource(sessions)
    source.refresh()
    app = create_gateway_app(_settings(), source)
    app.state.backend_allowlist = BackendAllowlist.from_networks(LOOPBACK_ONLY)
    include_admin_routers(app, sessions, source, SloTracker(sessions, registry=CollectorRegistry()))
    # The tier routes too (wake, activity, status); no engine templates, so a fuzzed wake can
    # only be refused: engines start from the configuration alone, never from a request.
    tiers = TierManager(sessions, EngineSupervisor(), lambda: None, TierConfig())
    app.include_router(build_tiers_router(tiers))
    server, thread = _serve(app, port)
    return Server(f"http://127.0.0.1:{port}", server, thread,
                  {"Authorization": f"Bearer {secret}"}, key_id, sessions)


def start_fake_engine(port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.fake_engine", "--port",
                             str(port), "--name", "fuzz"], cwd=ROOT, env=env)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc


def start_openai(engine_url: str, port: int) -> Server:
    backend = BackendView(id="fuzz", url=engine_url, engine="vllm", served_model="fake",
                          gpu=None, weight=1.0, tier="hot", state="ready", adapters=("lora1",),
                          version=None)
    model = ModelView(name="fake", context_length=None, backends=(backend,),
                      routing="round_robin", fallbacks=(), tier="hot", price_in_per_1k=0.0,
                      price_out_per_1k=0.0, splits=(), adapters=("lora1",),
                      modalities=("text", "image", "audio", "file", "video"))
    key = KeyView(key_id=1, key_hash=hash_key(OPENAI_KEY), name="fuzz", team=None, role="user",
                  models=None, rpm_limit=None, tpm_limit=None, max_budget=None,
                  priority="standard", expires_at=None, revoked=False)
    source = MutableSource(RoutingSnapshot(version=1, models={"fake": model},
                                           aliases={"fake:prod": "fake"},
                                           keys={key.key_hash: key}))
    server, thread = _serve(create_gateway_app(_settings(), source), port)
    return Server(f"http://127.0.0.1:{port}", server, thread,
                  {"Authorization": f"Bearer {OPENAI_KEY}"})

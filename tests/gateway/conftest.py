"""Gateway test rig: fake engines in subprocesses, the gateway in a uvicorn thread, real HTTP."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from common.auth.keys import hash_key
from gateway.app import create_gateway_app
from gateway.settings import GatewaySettings
from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot, SplitView

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"user": "ip-user-secret", "admin": "ip-admin-secret", "revoked": "ip-revoked-secret",
        "expired": "ip-expired-secret", "only_other": "ip-only-other-secret"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class FakeEngine:
    name: str
    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def control(self, **config) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/control", json=config, trust_env=False)

    def stats(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/stats", trust_env=False).json()


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, trust_env=False, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def start_engine(name: str) -> FakeEngine:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.fake_engine", "--port",
                             str(port), "--name", name], cwd=ROOT, env=env)
    engine = FakeEngine(name, port, proc)
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
    except RuntimeError:
        proc.kill()
        raise
    return engine


@pytest.fixture(scope="package")   # stopped once the folder is done
def engines():
    started = [start_engine(f"e{i}") for i in range(3)]
    yield started
    for engine in started:
        engine.proc.terminate()
    for engine in started:
        engine.proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def reset_engines(request):
    if "engines" in request.fixturenames:
        for engine in request.getfixturevalue("engines"):
            engine.control(reset=True)
    yield


def backend(engine: FakeEngine, state: str = "ready", weight: float = 1.0,
            version: str | None = "v1", adapters: tuple[str, ...] = ()) -> BackendView:
    return BackendView(id=engine.name, url=engine.url, engine="vllm", served_model="served-m",
                       gpu=None, weight=weight, tier="hot", state=state, adapters=adapters,
                       version=version)


def model(name: str, backends, context_length: int = 4096, routing: str = "round_robin",
          fallbacks: tuple[str, ...] = (), splits: tuple[SplitView, ...] = (),
          adapters: tuple[str, ...] = (), price_in: float = 0.0, price_out: float = 0.0):
    return ModelView(name=name, context_length=context_length, backends=tuple(backends),
                     routing=routing, fallbacks=fallbacks, tier="hot", price_in_per_1k=price_in,
                     price_out_per_1k=price_out, splits=splits, adapters=adapters)


def key(name: str, role: str = "user", models=None, revoked=False, expires_at=None,
        rpm=None, tpm=None, team="team-a", max_budget=None, budget_period=None) -> KeyView:
    return KeyView(key_id=abs(hash(name)) % 10_000, key_hash=hash_key(KEYS[name]), name=name,
                   team=team, role=role, models=models, rpm_limit=rpm, tpm_limit=tpm,
                   max_budget=max_budget, priority="standard", expires_at=expires_at,
                   revoked=revoked, budget_period=budget_period)


def default_keys() -> dict:
    views = [key("user"), key("admin", role="admin"), key("revoked", revoked=True),
             key("expired", expires_at=time.time() - 60), key("only_other", models=("other",))]
    return {k.key_hash: k for k in views}


def snapshot(models, keys=None, version: int = 1) -> RoutingSnapshot:
    return RoutingSnapshot(version=version, models={m.name: m for m in models}, aliases={},
                           keys=keys if keys is not None else default_keys())


class MutableSource:
    def __init__(self, current: RoutingSnapshot):
        self.current = current


@dataclass
class Gateway:
    url: str
    source: MutableSource
    app: object

    def client(self, key: str | None = "user", **kw) -> httpx.Client:
        headers = {"authorization": f"Bearer {KEYS[key]}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, trust_env=False,
                            timeout=kw.pop("timeout", 20.0), **kw)

    @property
    def state(self):
        return self.app.state.gateway


def start_gateway(settings: GatewaySettings, source: MutableSource):
    app = create_gateway_app(settings, source)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           loop="asyncio", http="httptools", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return Gateway(f"http://127.0.0.1:{port}", source, app), server, thread


@pytest.fixture
def make_gateway():
    """make_gateway(models, **settings) -> a running Gateway (stopped after the test)."""
    running = []

    def make(models, keys=None, **settings):
        settings.setdefault("routing", {"load_poll_interval_s": 0})
        gw, server, thread = start_gateway(GatewaySettings.model_validate(settings),
                                           MutableSource(snapshot(models, keys)))
        running.append((server, thread))
        return gw

    yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


def chat_body(model_name: str = "m", **extra) -> dict:
    return {"model": model_name, "messages": [{"role": "user", "content": "hello"}], **extra}

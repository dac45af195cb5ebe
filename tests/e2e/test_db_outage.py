"""The gateway keeps serving from its last snapshot while PostgreSQL is unreachable, and picks
up registry changes again once it is back."""
from __future__ import annotations

import time
import uuid

import httpx
import psycopg
import pytest

from tests.conftest import free_port, running_up, start_process, stop_process, wait_http
from tests.e2e.tcp_proxy import TcpProxy

MODEL = "outage-model"


@pytest.fixture(scope="module")
def database():
    name = f"inferplane_outage_{uuid.uuid4().hex[:8]}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def stack(database, tmp_path_factory):
    work = tmp_path_factory.mktemp("outage")
    proxy = TcpProxy(free_port(), 5432)
    proxy.start()
    engine_port = free_port()
    engine = start_process(["-m", "builtin_engine", "serve", "--simulate", "--port", str(engine_port),
                            "--served-model-name", MODEL, "--sim-decode-base-s", "0.001"],
                           log_path=work / "engine.log")
    config = {"database_url": f"postgresql://postgres@127.0.0.1:{proxy.listen_port}/{database}",
              "models": [{"name": MODEL, "engine": "openai",
                          "backends": [{"url": f"http://127.0.0.1:{engine_port}/v1"}]}]}
    try:
        wait_http(f"http://127.0.0.1:{engine_port}/health", engine, timeout=120)
        with running_up(work, config) as (base, key, _):
            yield {"base": base, "key": key, "proxy": proxy}
    finally:
        stop_process(engine)
        proxy.close()


def chat(stack) -> httpx.Response:
    return httpx.post(stack["base"] + "/v1/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {stack['key']}"},
                      json={"model": MODEL, "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]})


def test_serves_from_last_snapshot_while_database_is_down(stack):
    assert chat(stack).status_code == 200
    stack["proxy"].stop()
    time.sleep(2.0)  # several poll intervals against a dead database
    for _ in range(5):
        assert chat(stack).status_code == 200
    assert httpx.get(stack["base"] + "/readyz").status_code == 200
    stack["proxy"].start()


def test_registry_changes_flow_again_after_recovery(stack):
    headers = {"Authorization": f"Bearer {stack['key']}"}
    deadline = time.monotonic() + 30
    while True:  # the admin API answers 503 until its pool reconnects
        resp = httpx.post(stack["base"] + "/admin/v1/keys", headers=headers, timeout=10,
                          json={"name": "after-outage", "role": "user"})
        if resp.status_code == 201 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert resp.status_code == 201, resp.text
    secret = resp.json()["secret"]
    deadline = time.monotonic() + 5
    status = None
    while time.monotonic() < deadline:
        status = httpx.post(stack["base"] + "/v1/chat/completions", timeout=30,
                            headers={"Authorization": f"Bearer {secret}"},
                            json={"model": MODEL, "max_tokens": 2,
                                  "messages": [{"role": "user", "content": "hi"}]}).status_code
        if status == 200:
            break
        time.sleep(0.2)
    assert status == 200

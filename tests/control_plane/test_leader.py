"""Two control planes on one PostgreSQL database: one leads, the other stands by and takes
over when the leader is SIGKILLed; elected by the database's advisory lock or a Redis lease."""
from __future__ import annotations

import time
import uuid

import httpx
import psycopg
import pytest
import yaml

from tests.conftest import free_port, start_process, stop_process, wait_http

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def database():
    name = f"inferplane_leader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


REDIS = "redis://127.0.0.1:6379/0"


def control_plane(tmp_path, database, name, leader=None):
    config = tmp_path / f"{name}.yaml"
    settings = {"database_url": database, "models": [], "data_dir": str(tmp_path / name)}
    if leader is not None:
        settings |= {"redis_url": REDIS, "leader": leader}
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    log = tmp_path / f"{name}.log"
    proc = start_process(["-m", "control_plane", "control-plane", "--config", str(config),
                          "--port", str(port)], log_path=log,
                         env={"INFERPLANE_ADMIN_KEY": "ip-leader-test-admin-key"})
    return proc, f"http://127.0.0.1:{port}", log


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/openapi.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("lock", ["database", "redis"])
def test_one_leads_the_other_takes_over(tmp_path, database, lock):
    # a lease of its own per run, short so that the dead leader's runs out soon
    leader = None if lock == "database" else {"lock": "redis", "lease_ms": 2000,
                                              "key": f"inferplane:test-leader:{uuid.uuid4().hex}"}
    first, first_url, _ = control_plane(tmp_path, database, "first", leader)
    second = None
    try:
        wait_http(first_url + "/openapi.json", first, timeout=60)
        second, second_url, second_log = control_plane(tmp_path, database, "second", leader)
        deadline = time.monotonic() + 30
        while "standby" not in second_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "standby" in second_log.read_text()
        assert not answers(second_url) and second.poll() is None
        first.kill()  # SIGKILL: its database session ends (the lock frees) or its lease runs out
        first.wait(10)
        wait_http(second_url + "/openapi.json", second, timeout=30)
        headers = {"Authorization": "Bearer ip-leader-test-admin-key"}
        assert httpx.get(second_url + "/admin/v1/models", headers=headers).status_code == 200
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)

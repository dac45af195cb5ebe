"""Two gateway replicas as real processes (`python -m control_plane gateway`) sharing one
Postgres database and the real Redis, in front of one simulated builtin engine.

The tests in this folder get their own Postgres database (created and dropped here) and an API key id
far from any other test's, so its Redis counters ("inferplane:{rl}:key:<id>:...") collide with
nothing; only those counters are deleted afterwards.
"""
from __future__ import annotations

import random
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import redis

from tests.conftest import ROOT, free_port, start_process, stop_process, wait_http

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
RATE_LIMIT_PREFIX = "inferplane:{rl}:"
MODEL = "sim-model"


@dataclass
class Deployment:
    config: Path
    key_id: int
    secret: str
    engine_port: int
    gateways: list[str] = field(default_factory=list)   # base URLs, e.g. http://127.0.0.1:P


def write_config(path: Path, database_url: str, redis_url: str, engine_port: int,
                 fail_mode: str = "fail_open") -> Path:
    path.write_text(
        f"data_dir: {path.parent / 'data'}\n"
        f"database_url: {database_url}\n"
        f"redis_url: {redis_url}\n"
        f"models:\n"
        f"  - name: {MODEL}\n"
        f"    engine: openai\n"
        f"    context_length: 4096\n"
        f"    backends: [{{url: 'http://127.0.0.1:{engine_port}/v1', served_model: {MODEL}}}]\n"
        f"gateway:\n"
        f"  routing: {{load_poll_interval_s: 0}}\n"
        f"  limits: {{fail_mode: {fail_mode}}}\n")
    return path


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "control_plane", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="package")
def postgres_url():
    """A fresh database on the real Postgres, dropped at the end."""
    name = f"ip_multi_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def prepare_registry(config: Path, database_url: str, tpm_limit: int) -> tuple[int, str]:
    """Migrate, start key ids at a random high value, create the key, register the model."""
    from control_plane.bootstrap import register_models
    from control_plane.settings import load_settings
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    upgrade(database_url, progress=None)
    key_id = random.randrange(10**9, 2 * 10**9)
    with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"SELECT setval(pg_get_serial_sequence('api_keys', 'id'), {key_id}, false)")
    secret = cli("keys", "create", "--name", "k", "--tpm-limit", str(tpm_limit),
                 "--config", str(config)).strip().splitlines()[-1]
    register_models(make_session_factory(database_url), load_settings(config))
    return key_id, secret


def delete_counters(key_id: int) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{RATE_LIMIT_PREFIX}*:{key_id}:*", count=1000))
        return client.delete(*keys) if keys else 0
    finally:
        client.close()


def start_sim_engine(port: int, log: Path):
    proc = start_process(["-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
                          "--served-model-name", MODEL, "--sim-decode-base-s", "0.001",
                          "--sim-prefill-s-per-token", "0", "--log-level", "warning"],
                         log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def start_gateway(config: Path, port: int, log: Path):
    proc = start_process(["-m", "control_plane", "gateway", "--config", str(config), "--port",
                          str(port)], log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=120)
    except BaseException:
        stop_process(proc)
        raise
    return proc


TPM_LIMIT = 3000


@pytest.fixture(scope="package")   # its processes stop once the folder is done
def deployment(tmp_path_factory, postgres_url):
    work = tmp_path_factory.mktemp("multi_replica")
    engine_port = free_port()
    config = write_config(work / "inferplane.yaml", postgres_url, REDIS_URL, engine_port)
    key_id, secret = prepare_registry(config, postgres_url, TPM_LIMIT)
    procs = []
    try:
        procs.append(start_sim_engine(engine_port, work / "engine.log"))
        dep = Deployment(config, key_id, secret, engine_port)
        for i in range(2):
            port = free_port()
            procs.append(start_gateway(config, port, work / f"gateway{i}.log"))
            dep.gateways.append(f"http://127.0.0.1:{port}")
        yield dep
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        delete_counters(key_id)

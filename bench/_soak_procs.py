"""The processes a soak runs and watches (see bench/soak.py): the fake engine, `inferplane up`
in the production shape (worker processes, PostgreSQL, Redis) or the embedded one (SQLite),
a throw-away PostgreSQL database, and per-role samples of the `up` process tree.

    db = SoakDatabase.create("postgresql://postgres@127.0.0.1:5432")   # soak_<random>
    engine = start_engine(port, logs)
    up, key = start_up(work, port, engine_port, UpShape(workers=2, database_url=db.url,
                                                        redis_url="redis://127.0.0.1:6379/0"))
    tree = sample_tree(up.pid)          # {"up": RoleSample, "supervisor": ..., "worker": ...}
    tasks, lag_s = loop_metrics(metrics_text)
    db.drop()
"""
from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from _common import ROOT, free_port, wait_http

MODEL = "soak"
PRICE_IN_PER_1K, PRICE_OUT_PER_1K = 1.0, 2.0
ROLES = ("up", "supervisor", "worker", "other")


@dataclass(frozen=True)
class UpShape:
    """How `inferplane up` runs: gateway workers, the registry database, Redis or none."""
    workers: int
    database_url: str | None      # None: SQLite in the data directory
    redis_url: str | None


def start_engine(port: int, logs: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.fake_engine", "--port",
                             str(port), "--name", "soak-engine"], cwd=ROOT,
                            stdout=open(logs / "engine.log", "ab"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", proc)
    # Streams last ~0.2 s: long enough to be cut mid-way, short enough to stay cheap.
    httpx.post(f"http://127.0.0.1:{port}/control",
               json={"first_token_delay": 0.02, "token_delay": 0.02})
    return proc


def up_config(work: Path, engine_port: int, shape: UpShape) -> dict:
    # Health probes every 10 s: on a crowded box a probe slower than its 2 s timeout must not
    # take the backend out between restarts (the gateway's breaker reacts to real failures).
    config = {"data_dir": str(work / "data"), "health_interval_s": 10,
              "models": [{"name": MODEL, "engine": "openai", "context_length": 2048,
                          "price_in_per_1k": PRICE_IN_PER_1K,
                          "price_out_per_1k": PRICE_OUT_PER_1K, "backends": [
                              {"url": f"http://127.0.0.1:{engine_port}/v1",
                               "served_model": MODEL}]}],
              # A short open breaker: traffic returns soon after the restarted backend does.
              "gateway": {"log_level": "WARNING", "routing": {"load_poll_interval_s": 1},
                          "breaker": {"open_seconds": 2}}}
    if shape.database_url:
        config["database_url"] = shape.database_url
    if shape.redis_url:
        config["redis_url"] = shape.redis_url
    return config


def start_up(work: Path, port: int, engine_port: int,
             shape: UpShape) -> tuple[subprocess.Popen, str]:
    """`inferplane up` on `port` in `shape`; (its process, the admin key) once it is ready."""
    (work / "inferplane.yaml").write_text(yaml.safe_dump(up_config(work, engine_port, shape)))
    env = {k: v for k, v in os.environ.items() if k != "INFERPLANE_ADMIN_KEY"}
    proc = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                             str(work / "inferplane.yaml"), "--port", str(port),
                             "--workers", str(shape.workers)], cwd=ROOT,
                            env=env, stdout=open(work / "up.log", "wb"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/readyz", proc, timeout=180)
    return proc, (work / "data" / "admin.key").read_text().strip()


def stop(proc: subprocess.Popen | None, timeout: float = 60) -> None:
    """SIGINT (what Ctrl-C sends: `up` drains and flushes its usage), then SIGKILL if late."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@dataclass
class RoleSample:
    """RSS and open descriptors summed over the live processes of one role."""
    rss_mib: float = 0.0
    fds: int = 0
    pids: list[int] = field(default_factory=list)
    rss_by_pid: dict[int, float] = field(default_factory=dict)
    fds_by_pid: dict[int, int] = field(default_factory=dict)


def _roles(up_pid: int) -> dict[int, str]:
    """pid -> role for the `up` tree. The worker supervisor is forked (not exec'd) by `up`, so
    it shares its command line; its children are the gateway workers. Anything else under
    `up` (builtin engines) is `other`. A single-process `up` is the `up` role alone."""
    import psutil

    up = psutil.Process(up_pid)
    roles = {up_pid: "up"}
    cmdline = up.cmdline()
    for child in up.children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.cmdline() == cmdline:
                roles[child.pid] = "supervisor"
                for worker in child.children():
                    roles[worker.pid] = "worker"
                continue
            for proc in [child, *child.children(recursive=True)]:
                roles[proc.pid] = "other"
    return roles


def sample_tree(up_pid: int) -> dict[str, RoleSample]:
    """Per-role RSS (MiB) and descriptors of the `up` tree, from /proc; a process that ends
    between the listing and the read is left out."""
    import psutil

    out = {role: RoleSample() for role in ROLES}
    for pid, role in _roles(up_pid).items():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc = psutil.Process(pid)
            rss, fds = proc.memory_info().rss / 2**20, proc.num_fds()
            out[role].rss_mib += rss
            out[role].fds += fds
            out[role].pids.append(pid)
            out[role].rss_by_pid[pid] = rss
            out[role].fds_by_pid[pid] = fds
    return {role: sample for role, sample in out.items() if sample.pids}


def worker_pids(up_pid: int) -> list[int]:
    return sorted(pid for pid, role in _roles(up_pid).items() if role == "worker")


def metric_samples(text: str, name: str, model: str | None = None) -> list[float]:
    """Values of the samples of family sample `name` in a Prometheus text page (optionally
    only those labelled model="<model>")."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ("{", " "):
            continue
        if model is not None and f'model="{model}"' not in line:
            continue
        out.append(float(line.rsplit(" ", 1)[1]))
    return out


def loop_metrics(text: str) -> tuple[float, float]:
    """(asyncio tasks, worst loop lag in seconds) of the gateway: with workers, /metrics holds
    their merged families; any per-process samples are summed (tasks) and maxed (lag)."""
    tasks = metric_samples(text, "inferplane_event_loop_tasks")
    lags = metric_samples(text, "inferplane_event_loop_lag_seconds")
    return sum(tasks), max(lags, default=0.0)


@dataclass
class SoakDatabase:
    """A PostgreSQL database made for one soak and dropped after it (`owned`), or the one
    the operator named (kept)."""
    url: str                 # SQLAlchemy URL (postgresql+psycopg://...)
    admin_url: str = ""      # libpq URL of the server's `postgres` database
    name: str = ""
    owned: bool = False

    @classmethod
    def create(cls, server: str) -> "SoakDatabase":
        import psycopg

        base = server.replace("postgresql+psycopg://", "postgresql://").rstrip("/")
        name = f"soak_{secrets.token_hex(4)}"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return cls(sqlalchemy_url(f"{base}/{name}"), f"{base}/postgres", name, owned=True)

    def drop(self) -> None:
        if not self.owned:
            return
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def sqlalchemy_url(url: str) -> str:
    """postgresql:// -> postgresql+psycopg:// (the driver the product installs)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url

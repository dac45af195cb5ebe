"""`inferplane gateway --workers 2` without Redis: two real worker processes on one port, and
one rate limit enforced exactly by both together (the supervisor's shared store), over real
HTTP in front of the simulated builtin engine."""
from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import httpx
import psutil
import pytest

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from common.metric_names import Metric
from common.workers import MAX_FAILED_STARTS, METRICS_DIR_PREFIX
from gateway.limits.budget import Budget
from gateway.limits.shared import (ONE_WAY_DELAY_S, LimitsOwner, SharedRateLimiter,
                                   SharedSpendTracker)
from gateway.limits.types import Limit
from tests.conftest import free_port, start_process, stop_process, wait_http
from tests.e2e.multi_replica.conftest import MODEL, cli, start_sim_engine, write_config

RPM = 12
WORKERS = 2


def _config(work, engine_port: int):
    """The replicas' config with SQLite and no Redis (YAML null): the embedded default."""
    return write_config(work / "inferplane.yaml", f"sqlite:///{work / 'data' / 'ip.db'}",
                        "null", engine_port)


@contextlib.contextmanager
def running_gateway(work, *key_args: str):
    """`gateway --workers 2` on a migrated SQLite registry: (base URL, a key's secret, the
    supervisor's process, the session factory of that registry)."""
    from control_plane.bootstrap import register_models
    from control_plane.settings import load_settings
    from registry.db import make_session_factory

    engine_port, port = free_port(), free_port()
    config = _config(work, engine_port)
    cli("db", "upgrade", "--config", str(config))
    secret = cli("keys", "create", "--name", "w", *key_args, "--config",
                 str(config)).strip().splitlines()[-1]
    sessions = make_session_factory(load_settings(config).resolved_database_url())
    register_models(sessions, load_settings(config))
    engine = start_sim_engine(engine_port, work / "engine.log")
    proc = start_process(["-m", "control_plane", "gateway", "--config", str(config), "--port",
                          str(port), "--workers", str(WORKERS)], log_path=work / "gateway.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=120)
        yield f"http://127.0.0.1:{port}", secret, proc, sessions
    finally:
        stop_process(proc)
        stop_process(engine)
        sessions.kw["bind"].dispose()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with running_gateway(tmp_path_factory.mktemp("workers"), "--rpm-limit", str(RPM)) as (
            base, secret, proc, _):
        yield base, secret, proc


async def _fire(base: str, secret: str, n: int) -> list[httpx.Response]:
    """n concurrent requests, each on a connection of its own (so both workers get some)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def one() -> httpx.Response:
        async with httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as client:
            return await client.post("/v1/chat/completions", json=body,
                                     headers={"authorization": f"Bearer {secret}"})
    return await asyncio.gather(*(one() for _ in range(n)))


def _requests_counted_by(pid: int) -> float:
    """The requests one worker answered, read from its own metric files (the supervisor's
    shared directory holds one `counter_<pid>.db` per worker): exact, where the kernel's CPU
    ticks miss a worker that answered a few cheap 429s."""
    files = glob.glob(os.path.join(tempfile.gettempdir(), f"{METRICS_DIR_PREFIX}*",
                                   f"counter_{pid}.db"))
    with tempfile.TemporaryDirectory() as alone:
        for path in files:
            shutil.copy(path, alone)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=alone)
        return sum(sample.value for family in registry.collect() for sample in family.samples
                   if sample.name == Metric.REQUESTS.total)


def test_two_workers_enforce_one_rpm_limit_exactly(gateway):
    base, secret, proc = gateway
    workers = psutil.Process(proc.pid).children()
    assert len(workers) == WORKERS and all(w.is_running() for w in workers)
    before = [_requests_counted_by(w.pid) for w in workers]
    codes = [r.status_code for r in asyncio.run(_fire(base, secret, 3 * RPM))]
    assert sorted(set(codes)) == [200, 429], codes
    assert codes.count(200) == RPM, codes   # per-worker stores would admit up to 2 * RPM
    served = [_requests_counted_by(w.pid) - b for w, b in zip(workers, before)]
    assert sum(served) == 3 * RPM, served
    assert all(n > 0 for n in served), f"a worker served nothing: {served}"


def test_stopping_the_supervisor_stops_every_worker(gateway):
    _, _, proc = gateway
    workers = psutil.Process(proc.pid).children()
    os.kill(proc.pid, signal.SIGTERM)   # the supervisor alone: it must pass the stop on
    assert proc.wait(timeout=30) == 0
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


def test_the_supervisor_writes_the_usage_its_workers_hand_off(tmp_path):
    """The workers only spool their usage; the supervisor writes it, a SIGKILLed worker's
    unhanded records included (the others are stopped then, and the supervisor writes what
    is left before it exits): every answered request reaches the request log once."""
    from sqlalchemy import select

    from registry.orm.request_log import RequestLog

    with running_gateway(tmp_path) as (base, secret, proc, sessions):
        answers = asyncio.run(_fire(base, secret, 24))
        assert [r.status_code for r in answers] == [200] * 24
        victim = psutil.Process(proc.pid).children()[0]
        victim.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) != 0   # a worker ended: the gateway stops
        with sessions() as s:
            logged = list(s.scalars(select(RequestLog.request_id)))
    answered = {r.headers["x-request-id"] for r in answers}
    assert sorted(logged) == sorted(answered)
    assert not list((tmp_path / "data" / "usage-spool").glob("*.jsonl")), "all written"


async def _shared_budget_race(path: str) -> list[bool]:
    owner = LimitsOwner(path)
    await owner.start()
    trackers = [SharedSpendTracker(path) for _ in range(3)]   # three "workers"
    budget = [Budget("key", "b1", 1.0)]
    try:
        results = await asyncio.gather(*(t.reserve(budget, 0.125) for t in trackers
                                         for _ in range(8)))
        held = [hold for hold, refused in results if hold is not None]
        await asyncio.gather(*(trackers[0].settle(h, 0.0625) for h in held))
        spent = await trackers[1].spent(budget[0])
        limiter = SharedRateLimiter(path)
        decisions = [await limiter.acquire([Limit("key", "r1", rpm=2)], 1) for _ in range(3)]
        await limiter.close()
        return [len(held) == 8, abs(spent - 0.5) < 1e-9,
                [d.allowed for d in decisions] == [True, True, False]]
    finally:
        for t in trackers:
            await t.close()
        await owner.close()


async def _tpm_corrections(path: str) -> list[bool]:
    owner = LimitsOwner(path)
    await owner.start()
    a, b = SharedRateLimiter(path), SharedRateLimiter(path)   # two "workers"
    tpm = [Limit("key", "t1", tpm=100)]
    try:
        first = await a.acquire(tpm, 100)            # the estimate takes the whole minute
        full = not (await b.acquire(tpm, 1)).allowed
        await a.reconcile(first.reservation, 10)     # 90 back, one-way: no call from a follows
        await asyncio.sleep(ONE_WAY_DELAY_S * 5)
        other_sees_it = (await b.acquire(tpm, 50)).allowed        # 10 + 50 used
        second = await a.acquire(tpm, 40)                          # 100 used
        await a.reconcile(second.reservation, 0)                   # 40 back, waiting in a
        own_next_sees_it = (await a.acquire(tpm, 40)).allowed     # carried ahead of it
        await a.reconcile(first.reservation, 0)      # settled already: nothing is sent twice
        return [full, other_sees_it, second.allowed, own_next_sees_it,
                not (await b.acquire(tpm, 1)).allowed]
    finally:
        await a.close()
        await b.close()
        await owner.close()


def test_tpm_corrections_go_one_way_and_arrive_in_order(tmp_path):
    """A refund after a request is not waited for: it rides ahead of the same worker's next
    call, or goes alone within ONE_WAY_DELAY_S when no call comes; the limit stays exact."""
    assert asyncio.run(_tpm_corrections(str(tmp_path / "limits.sock"))) == [True] * 5


def test_shared_store_budget_holds_and_limits_are_exact(tmp_path):
    assert asyncio.run(_shared_budget_race(str(tmp_path / "limits.sock"))) == [True] * 3


def test_replacing_gives_up_on_workers_that_die_at_start():
    """replace=True (`up --workers`) forks a dead worker again, but not forever: after
    MAX_FAILED_STARTS short-lived workers in a row the supervisor stops with their status."""
    program = ("import sys; from common.workers import serve_workers; "
               "sys.exit(serve_workers([None], lambda _: 3, None, replace=True))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("in its place") == MAX_FAILED_STARTS - 1, done.stderr
    assert done.stderr.count("stopping the others") == 1, done.stderr

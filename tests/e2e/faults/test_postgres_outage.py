"""PostgreSQL crashed and restarted under load: `inferplane up` on a private cluster keeps
serving from its last snapshot, queues usage while the database is gone, and writes all of
it once the database is back: request log, spend and counters account for every request.
(tests/e2e/test_db_outage.py cuts the network to the shared cluster instead.)
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import (PrivatePostgres, Stack, assert_nothing_lost, openai_model,
                                   start_fake_engine, stop_process)

PG_PORT = 19432
MODEL = "durable"
STOP_AT, START_AT, END_AT = 1.5, 5.0, 7.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("pg-outage")
    pg = PrivatePostgres(PG_PORT)
    pg.init()
    pg.start()
    engine_port = free_port()
    engine = start_fake_engine(engine_port, MODEL, work / "engine.log")
    config = {"database_url": pg.url, "health_interval_s": 60,
              "models": [openai_model(MODEL, f"http://127.0.0.1:{engine_port}/v1")],
              "gateway": {"routing": {"load_poll_interval_s": 0}}}
    try:
        with running_up(work, config) as (base, admin_key, proc):
            stack = Stack(base, admin_key)
            stack.create_key()
            time.sleep(1.0)
            yield stack, pg, proc
    finally:
        stop_process(engine)
        pg.remove()


def test_serves_through_a_database_crash_and_loses_no_usage(stack):
    stack, pg, proc = stack
    before = stack.books(MODEL)
    results: list[tuple[float, int]] = []
    t0 = time.monotonic()

    def drive() -> None:
        with httpx.Client(timeout=30) as client:
            while (now := time.monotonic() - t0) < END_AT:
                response = stack.chat(MODEL, stream=len(results) % 2 == 1, client=client)
                results.append((now, response.status_code))

    load = threading.Thread(target=drive)
    load.start()
    time.sleep(STOP_AT)
    pg.crash()
    time.sleep(START_AT - STOP_AT)
    pg.start()
    load.join(60)
    codes = [code for _, code in results]
    assert any(STOP_AT + 0.3 < t < START_AT for t, _ in results)
    assert set(codes) == {200}, codes            # the request path never touches SQL
    assert proc.poll() is None
    assert httpx.get(stack.base + "/readyz", timeout=10).status_code == 200
    # Usage queued during the outage is written once the database is back.
    assert_nothing_lost(stack, MODEL, before, codes)

"""Redis killed and restarted under load, in both fail modes: two `inferplane up` gateways
share a private redis-server (limits and budgets live there) while clients keep sending.

fail_open serves every request through the outage; fail_closed answers 503 (OpenAI shape,
Retry-After) while Redis is down and serves again once it is back. Either way each served
request is in the request log, the counters and the spend, each refusal in the counters
(refused at admission, it is not usage), and the limits count again in the restarted Redis.
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest
import redis

from common.metric_names import Metric
from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import (PrivateRedis, Stack, assert_nothing_lost, delta,
                                       openai_model, start_fake_engine, stop_process)

REDIS_PORT = 19479
MODEL = "limited"
STOP_AT, START_AT, END_AT = 1.5, 4.0, 7.5


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    server = PrivateRedis(REDIS_PORT, tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateways(private_redis, tmp_path_factory):
    work = tmp_path_factory.mktemp("redis-outage")
    port = free_port()
    engine = start_fake_engine(port, "limited", work / "engine.log")
    stacks = {}
    (work / "open").mkdir()
    (work / "closed").mkdir()
    try:
        with running_up(work / "open", _config(private_redis, port, "fail_open")) as a, \
                running_up(work / "closed", _config(private_redis, port, "fail_closed")) as b:
            for mode, (base, admin_key, proc) in (("fail_open", a), ("fail_closed", b)):
                stacks[mode] = Stack(base, admin_key)
                # Limits and a budget, so every request consults Redis twice.
                stacks[mode].create_key(rpm_limit=100_000, tpm_limit=100_000_000,
                                        max_budget=1000.0)
            time.sleep(1.0)   # the keys reach both snapshots
            yield stacks
    finally:
        stop_process(engine)


def _config(server: PrivateRedis, engine_port: int, mode: str) -> dict:
    return {"redis_url": server.url, "health_interval_s": 60,
            "models": [openai_model(MODEL, f"http://127.0.0.1:{engine_port}/v1")],
            "gateway": {"limits": {"fail_mode": mode}, "routing": {"load_poll_interval_s": 0}}}


def drive(stack: Stack, t0: float, results: list) -> None:
    with httpx.Client(timeout=30) as client:
        while (now := time.monotonic() - t0) < END_AT:
            response = stack.chat(MODEL, stream=len(results) % 2 == 1, client=client)
            results.append((now, response.status_code, response, time.monotonic() - t0))


@pytest.fixture(scope="module")
def outage(gateways, private_redis):
    """Both gateways under load; Redis killed at STOP_AT, restarted at START_AT."""
    before = {mode: stack.books(MODEL) for mode, stack in gateways.items()}
    results = {mode: [] for mode in gateways}
    t0 = time.monotonic()
    threads = [threading.Thread(target=drive, args=(gateways[m], t0, results[m]))
               for m in gateways]
    for thread in threads:
        thread.start()
    time.sleep(STOP_AT)
    private_redis.stop()
    time.sleep(START_AT - STOP_AT)
    private_redis.start()
    for thread in threads:
        thread.join(60)
    return before, results


def test_fail_open_serves_every_request_through_the_outage(gateways, outage, private_redis):
    before, results = outage
    codes = [code for _, code, _, _ in results["fail_open"]]
    during = [code for t, code, _, _ in results["fail_open"] if STOP_AT + 0.2 < t < START_AT]
    assert during and set(codes) == {200}, codes
    assert_nothing_lost(gateways["fail_open"], MODEL, before["fail_open"], codes)
    # Accounting resumed in the restarted Redis (which started empty).
    client = redis.Redis(port=REDIS_PORT)
    assert any(key_counter(client, gateways["fail_open"].key_id))


def test_fail_closed_refuses_during_the_outage_and_recovers(gateways, outage, private_redis):
    before, results = outage
    rows = results["fail_closed"]
    codes = [code for _, code, _, _ in rows]
    assert set(codes) <= {200, 503}, codes
    # (start, end) of each request against the kill and the restart: 503s only in between.
    assert all(code == 200 for _, code, _, end in rows if end < STOP_AT - 0.05)
    refused = [r for _, code, r, _ in rows if code == 503]
    assert refused and all(end > STOP_AT - 0.05 and start < START_AT + 2.0
                           for start, code, _, end in rows if code == 503)
    assert all(code == 200 for start, code, _, _ in rows if start > START_AT + 2.0)
    assert any(start > START_AT + 2.0 for start, _, _, _ in rows)
    for response in refused:
        error = response.json()["error"]
        assert error["message"] and response.headers.get("retry-after")
    after = assert_nothing_lost(gateways["fail_closed"], MODEL, before["fail_closed"],
                                [c for c in codes if c == 200], refused=[503] * len(refused))
    assert delta(before["fail_closed"], after, Metric.REJECTIONS.total, model=MODEL,
                 reason="unavailable") == len(refused)
    client = redis.Redis(port=REDIS_PORT)
    assert any(key_counter(client, gateways["fail_closed"].key_id))


def key_counter(client: redis.Redis, key_id: int):
    return client.scan_iter(match=f"inferplane:{{rl}}:*:{key_id}*", count=1000)

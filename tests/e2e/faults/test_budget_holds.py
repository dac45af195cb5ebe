"""A gateway replica SIGKILLed while it holds budget reservations: two replicas (`inferplane
up` and `inferplane gateway`) share a SQLite registry and a private Redis; the killed one's
holds block the key's budget only until they expire, then the budget is whole again and only
real costs are charged.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
import redis
import yaml

from tests.conftest import free_port, running_up, start_process, wait_http
from tests.e2e.faults.conftest import (PrivateRedis, Stack, assert_nothing_lost, openai_model,
                                   start_fake_engine, stop_process)

REDIS_PORT = 19478
HOLD_S = 4.0
MODEL = "metered"
MAX_TOKENS = 100          # worst case ~$0.2 at $2 per 1k output tokens
BUDGET = 1.1              # after one paid request: room for four such holds, not five


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    work = tmp_path_factory.mktemp("holds")
    server = PrivateRedis(REDIS_PORT, work)
    server.start()
    engine_port = free_port()
    engine = start_fake_engine(engine_port, MODEL, work / "engine.log")
    config = {"database_url": f"sqlite:///{work / 'registry.db'}", "redis_url": server.url,
              "health_interval_s": 60,
              "models": [openai_model(MODEL, f"http://127.0.0.1:{engine_port}/v1")],
              "gateway": {"limits": {"budget_hold_s": HOLD_S},
                          "routing": {"load_poll_interval_s": 0}}}
    (work / "a").mkdir()
    try:
        with running_up(work / "a", config) as (base, admin_key, _):
            stack = Stack(base, admin_key)
            stack.create_key(max_budget=BUDGET)
            (work / "b.yaml").write_text(yaml.safe_dump(config))
            port = free_port()
            other = start_process(["-m", "control_plane", "gateway", "--config",
                                   str(work / "b.yaml"), "--port", str(port)],
                                  log_path=work / "b.log")
            try:
                wait_http(f"http://127.0.0.1:{port}/healthz", other, timeout=120)
                time.sleep(1.5)   # both snapshots hold the new key
                yield stack, f"http://127.0.0.1:{port}", other, engine_port
            finally:
                stop_process(other)
    finally:
        stop_process(engine)
        server.stop()


def held_usd(key_id: int) -> float:
    client = redis.Redis(port=REDIS_PORT)
    return sum(float(v) for key in client.scan_iter(match=f"*spend:key:{key_id}:held")
               for v in client.hvals(key))


def test_holds_of_a_killed_replica_expire_and_nothing_leaks(replicas):
    stack, other_base, other, engine_port = replicas
    control = f"http://127.0.0.1:{engine_port}"
    before = stack.books(MODEL)
    assert stack.chat(MODEL, max_tokens=MAX_TOKENS).status_code == 200   # a real, paid request
    httpx.post(control + "/control", json={"first_token_delay": 120})
    seen: list = []

    def doomed() -> None:
        try:
            seen.append(httpx.post(other_base + "/v1/chat/completions", timeout=60,
                                   headers=stack.user(), json={
                                       "model": MODEL, "max_tokens": MAX_TOKENS,
                                       "messages": [{"role": "user", "content": "hi"}]}))
        except httpx.HTTPError as exc:
            seen.append(exc)

    threads = [threading.Thread(target=doomed) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while httpx.get(control + "/stats").json()["running"] < 4:
        assert time.monotonic() < deadline, f"the replica never sent its four requests: {seen}"
        time.sleep(0.1)
    held = held_usd(stack.key_id)
    assert held > 0.75                                  # four worst cases are held
    os.kill(other.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    for thread in threads:
        thread.join(30)
    # The clients of the dead replica lose their connections: no answer, nothing billed.
    assert len(seen) == 4 and all(isinstance(s, httpx.TransportError) for s in seen), seen
    httpx.post(control + "/control", json={"reset": True})
    # While the orphaned holds live, the surviving replica refuses what would not fit.
    refused = stack.chat(MODEL, max_tokens=MAX_TOKENS)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    assert time.monotonic() - killed_at < HOLD_S
    while time.monotonic() - killed_at < HOLD_S + 0.5:
        time.sleep(0.1)
    served = [stack.chat(MODEL, max_tokens=MAX_TOKENS) for _ in range(3)]
    assert [r.status_code for r in served] == [200] * 3
    after = assert_nothing_lost(stack, MODEL, before, [200] * 4, refused=[429])
    # No leak: the held estimates are gone and Redis counts exactly what SQL charged.
    assert held_usd(stack.key_id) == pytest.approx(0.0, abs=1e-9)
    client = redis.Redis(port=REDIS_PORT)
    settled = float(client.get(f"inferplane:{{rl}}:spend:key:{stack.key_id}"))
    assert settled == pytest.approx(after.spend, abs=1e-9)
    assert after.spend == pytest.approx(sum(r["cost"] for r in after.log[:4]), abs=1e-9)

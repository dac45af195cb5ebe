"""Engines failing under `inferplane up`: SIGKILLed mid-stream (the builtin engine),
accepting connections and never answering, refusing connections, answering
after the first-token timeout (the fake engine). Each case checks what the client saw and
that the request log, spend and counters account for every request.

Health probes run every 60 s here, so the gateway meets each broken backend itself (its
breaker, timeouts and error mapping) instead of the prober routing around it first.
"""
from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from common.metric_names import Metric
from tests.conftest import running_up
from tests.e2e.faults.conftest import (BlackHole, Stack, assert_nothing_lost, delta, free_port,
                                       openai_model, start_builtin_engine, start_fake_engine,
                                       stop_process)

FIRST_TOKEN_S = 2.0
TOTAL_S = 6.0


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    work = tmp_path_factory.mktemp("engines")
    ports = {"real": free_port(), "slow": free_port()}
    hole = BlackHole()
    # The builtin engine's server and scheduler with the simulated executor: its tokens come
    # at a steady 50/s, so the kill lands mid-stream every time.
    procs = {"real": start_builtin_engine(ports["real"], "killed", work / "real.log",
                                          "--simulate", "--sim-decode-base-s", "0.02"),
             "slow": start_fake_engine(ports["slow"], "slow", work / "slow.log")}
    try:
        yield {"ports": ports, "procs": procs, "hole": hole, "refused_port": free_port()}
    finally:
        for proc in procs.values():
            stop_process(proc)
        hole.close()


@pytest.fixture(scope="module")
def stack(engines, tmp_path_factory):
    url = "http://127.0.0.1:{}/v1".format
    config = {"health_interval_s": 60, "models": [
        openai_model("killed", url(engines["ports"]["real"])),
        openai_model("hang", url(engines["hole"].port)),
        openai_model("refused", url(engines["refused_port"])),
        openai_model("slow", url(engines["ports"]["slow"]))],
        "gateway": {"timeouts": {"connect": 1.0, "first_token": FIRST_TOKEN_S, "total": TOTAL_S},
                    "routing": {"load_poll_interval_s": 0}}}
    with running_up(tmp_path_factory.mktemp("up"), config) as (base, admin_key, _):
        stack = Stack(base, admin_key)
        stack.create_key()
        time.sleep(1.0)   # the new key reaches the gateway's snapshot
        yield stack


def events(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[len("data: "):]


def test_engine_sigkilled_mid_stream_ends_with_an_error_event(stack, engines):
    before = stack.books("killed")
    body = {"model": "killed", "max_tokens": 200, "stream": True,
            "messages": [{"role": "user", "content": "Write a long story about the sea."}]}
    received, tail = [], []
    with httpx.stream("POST", stack.base + "/v1/chat/completions", json=body,
                      headers=stack.user(), timeout=60) as response:
        assert response.status_code == 200
        for data in events(response):
            if received and len(received) >= 3 and not tail:
                os.kill(engines["procs"]["real"].pid, signal.SIGKILL)
                tail.append("killed")
            if data == "[DONE]":
                tail.append(data)
                break
            chunk = json.loads(data)
            if "error" in chunk:
                tail.append(chunk["error"])
            elif chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                received.append(chunk["choices"][0]["delta"]["content"])
    engines["procs"]["real"].wait(10)
    assert tail[-1] == "[DONE]" and isinstance(tail[-2], dict), tail
    assert "mid-stream" in tail[-2]["message"]
    after = assert_nothing_lost(stack, "killed", before, [502])
    row = after.log[0]
    assert row["status"] == "error" and row["stream"] is True
    # What the client received is billed, though the engine never sent its usage.
    assert row["completion_tokens"] >= len(received) - 1 > 0 and row["cost"] > 0
    assert delta(before, after, Metric.UPSTREAM_ERRORS.total, model="killed") == 1
    # The dead engine refuses from now on: a clean 502 naming the cause, never a hang.
    again = stack.chat("killed")
    assert again.status_code == 502 and again.json()["error"]["code"] == "connect"


def test_engine_that_never_answers_is_cut_off_by_the_timeouts(stack):
    """A stream waits for its first token at most FIRST_TOKEN_S; a plain request (whose
    first byte is its whole answer) at most TOTAL_S. Both end in a 504, never a hang."""
    before = stack.books("hang")
    started = time.monotonic()
    streamed = stack.chat("hang", stream=True)
    stream_s = time.monotonic() - started
    plain = stack.chat("hang")
    plain_s = time.monotonic() - started - stream_s
    assert streamed.status_code == plain.status_code == 504
    assert streamed.json()["error"]["code"] == "first_token_timeout"   # refused before a byte
    assert plain.json()["error"]["code"] == "timeout"
    assert FIRST_TOKEN_S - 0.1 <= stream_s < FIRST_TOKEN_S + 3, stream_s
    assert TOTAL_S - 0.1 <= plain_s < TOTAL_S + 3, plain_s
    after = assert_nothing_lost(stack, "hang", before, [504, 504])
    assert delta(before, after, Metric.UPSTREAM_ERRORS.total, model="hang",
                 kind="first_token_timeout") == 1
    assert delta(before, after, Metric.UPSTREAM_ERRORS.total, model="hang",
                 kind="timeout") == 1
    assert all(r["prompt_tokens"] == r["completion_tokens"] == 0 for r in after.log[:2])


def test_engine_refusing_connections_fails_fast_then_the_breaker_opens(stack):
    before = stack.books("refused")
    started = time.monotonic()
    responses = [stack.chat("refused", stream=i % 2 == 1) for i in range(8)]
    assert time.monotonic() - started < 5          # refused connects cost ms, not timeouts
    codes = [r.status_code for r in responses]
    # Five connect failures open the breaker; after that nothing is routable: 503 at once.
    assert codes == [502] * 5 + [503] * 3, codes
    assert {r.json()["error"]["code"] for r in responses} == {"connect", "no_ready_backend"}
    after = assert_nothing_lost(stack, "refused", before, codes)
    assert delta(before, after, Metric.UPSTREAM_ERRORS.total, model="refused",
                 kind="connect") == 5
    assert delta(before, after, Metric.REJECTIONS.total, model="refused",
                 reason="no_backend") == 3
    backend = next(labels for (name, labels), value in after.metrics.items()
                   if name == Metric.ROUTING_DECISIONS.total
                   and dict(labels)["model"] == "refused")
    breaker = after.metrics[(Metric.CIRCUIT_BREAKER_STATE,
                             (("backend", dict(backend)["backend"]),))]
    assert breaker == 2                             # BreakerState.OPEN.code


def test_slow_engine_past_first_token_timeout_is_cut_off_and_aborted(stack, engines):
    port = engines["ports"]["slow"]
    httpx.post(f"http://127.0.0.1:{port}/control",
               json={"reset": True, "first_token_delay": FIRST_TOKEN_S + 1.5})
    before = stack.books("slow")
    streamed = stack.chat("slow", stream=True)
    assert streamed.status_code == 504
    assert streamed.json()["error"]["code"] == "first_token_timeout"
    # The gateway hung up on the engine: the work was aborted there, not left running.
    deadline = time.monotonic() + 10
    while httpx.get(f"http://127.0.0.1:{port}/stats").json()["cancelled"] < 1:
        assert time.monotonic() < deadline, "the engine kept generating for nobody"
        time.sleep(0.2)
    # A plain request has no first token before its answer: it may take up to TOTAL_S.
    plain = stack.chat("slow")
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 8
    after = assert_nothing_lost(stack, "slow", before, [504, 200])
    assert delta(before, after, Metric.UPSTREAM_ERRORS.total, model="slow",
                 kind="first_token_timeout") == 1
    stats = httpx.get(f"http://127.0.0.1:{port}/stats").json()
    assert stats["requests"] == 2 and stats["cancelled"] == 1 and stats["completed"] == 1

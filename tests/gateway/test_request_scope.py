"""Whatever fails, a request leaves nothing behind: admission tickets, budget holds and TPM
reservations, breaker permits, in-flight counts (router book and gauge), engine streams.

A failure is injected at each stage of the pipeline (a RuntimeError from the stage's function,
or the real refusal the stage makes), for JSON and streamed answers, plus clients that leave
mid-stream or while waiting; then every resource the gateway hands out is checked released,
with the real in-memory limiter and the real Redis one.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from gateway.apis.chat.endpoint import CHAT
from gateway.limits import Budget, create_spend_tracker
from gateway.limits.gate import LimitsGate
from gateway.request_path import pipeline, proxy, request_scope
from gateway.settings import GatewaySettings
from gateway.traffic.breaker import CircuitBreaker
from tests.gateway.conftest import (MutableSource, backend, chat_body, default_keys, key, model,
                                    snapshot, start_gateway)

REDIS_URL = "redis://127.0.0.1:6379/0"
SETTINGS = {"routing": {"load_poll_interval_s": 0}, "retries": 1,
            "admission": {"max_inflight_per_backend": 1, "queue_size": 1,
                          "queue_timeout_s": 0.3}}


class Handed:
    """Every breaker permit and limits (reservation, hold) pair the gateway hands out."""

    def __init__(self, monkeypatch):
        self.permits, self.limits = [], []
        acquire, admit = CircuitBreaker.try_acquire, LimitsGate.admit

        def try_acquire(breaker):
            permit = acquire(breaker)
            if permit is not None:
                self.permits.append(permit)
            return permit

        async def gate_admit(gate, *args):
            decision, hold = await admit(gate, *args)
            self.limits.append((decision, hold))
            return decision, hold

        monkeypatch.setattr(CircuitBreaker, "try_acquire", try_acquire)
        monkeypatch.setattr(LimitsGate, "admit", gate_admit)


def _keys(**extra) -> dict:
    keys = default_keys()
    for view in (key("admin", role="admin", max_budget=100.0, tpm=1_000_000),):
        keys[view.key_hash] = view
    keys.update(extra)
    return keys


def _gateway(engines, **settings):
    models = [model("m", [backend(engines[0]), backend(engines[1])], price_in=0.01,
                    price_out=0.02),
              model("stream", [backend(engines[2])])]
    gw, server, thread = start_gateway(GatewaySettings.model_validate({**SETTINGS, **settings}),
                                       MutableSource(snapshot(models, _keys())))
    return gw, server, thread


@pytest.fixture(scope="module")
def gw(engines):
    gw, server, thread = _gateway(engines)
    yield gw
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def handed(monkeypatch):
    return Handed(monkeypatch)


def assert_released(gw, handed: Handed, engines=(), timeout: float = 3.0) -> None:
    """Nothing held: polls (a stream's end and limit settlement run off the response path)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _check_released(gw, handed, engines)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _check_released(gw, handed: Handed, engines) -> None:
    state = gw.state
    for name in ("m", "stream"):
        pool = state.admission.pool(name)
        assert (pool.in_flight, pool.depth) == (0, 0), f"admission ticket of {name} held"
        assert all(v == 0 for v in pool.in_flight_by_backend().values())
    assert all(v == 0 for v in state.router.book.inflight.values()), state.router.book.inflight
    for metric in state.metrics.inflight.collect():
        assert all(s.value == 0 for s in metric.samples), "in-flight gauge left up"
    assert all(p._done for p in handed.permits), "breaker permit left open"
    for decision, hold in handed.limits:
        assert decision.reservation is None or decision.reservation.settled, "TPM reservation"
        assert hold is None or hold.settled, "budget hold left"
    assert not state.limits._pending
    for engine in engines:
        assert engine.stats()["running"] == 0, f"engine stream of {engine.name} left open"


def _post(gw, path="/v1/chat/completions", key_name="admin", **kw):
    with gw.client(key_name) as c:
        return c.post(path, **kw)


# -- refusals before and at the limit stage ------------------------------------------------
@pytest.mark.parametrize("case", ["auth", "json", "schema", "model", "context", "content"])
def test_refusals_before_the_scope_hold_nothing(gw, handed, case):
    body = {"json": None, "schema": {"model": "m"}, "model": chat_body("nope"),
            "context": chat_body("m", max_tokens=100_000),
            "content": chat_body("m", messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}])}.get(case, chat_body("m"))
    r = _post(gw, key_name="revoked" if case == "auth" else "admin",
              **({"content": b"{"} if body is None else {"json": body}))
    assert r.status_code == {"auth": 401, "model": 404}.get(case, 400), r.text
    assert r.json()["error"]["message"]
    assert_released(gw, handed)


def test_a_budget_refusal_holds_nothing(gw, handed):
    broke = key("user", max_budget=0.0)
    gw.source.current = snapshot(gw.source.current.models.values(), _keys(**{
        broke.key_hash: broke}))
    try:
        r = _post(gw, key_name="user", json=chat_body("m"))
    finally:
        gw.source.current = snapshot(gw.source.current.models.values(), _keys())
    assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exceeded"
    assert_released(gw, handed)


# -- a failure injected into each stage ----------------------------------------------------
def _boom(*_args, **_kwargs):
    raise RuntimeError("injected")


async def _aboom(*_args, **_kwargs):
    raise RuntimeError("injected")


STAGES = {   # stage → (module, attribute, replacement)
    "limit": (LimitsGate, "admit", _aboom),
    "split": (pipeline, "choose_version", _boom),
    "ready": (pipeline, "has_candidates", _boom),
    "admit": (request_scope.RequestScope, "admit", _aboom),
    "shadow": (pipeline, "start_shadows", _boom),
    "tokenize": (pipeline, "tokenize_for_routing", _aboom),
    "route": (proxy, "_route", _boom),
    "call": (CHAT, "call", _aboom),
    "relay": (proxy, "finish_json", _boom),
    "account": (request_scope, "account", _boom),
}


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_at_each_stage_releases_everything(gw, handed, engines, monkeypatch, stage,
                                                     stream):
    target, name, replacement = STAGES[stage]
    if stage == "relay" and stream:
        target, name = proxy, "relay_stream"
    monkeypatch.setattr(target, name, replacement)
    before = _served(gw, "500")
    with gw.client("admin") as c:
        r = c.post("/v1/chat/completions", json=chat_body("m", stream=stream, max_tokens=3))
    if stream and stage == "account":
        assert r.status_code == 200   # the answer was complete before the books closed
    else:
        assert r.status_code == 500, (stage, r.status_code, r.text)
        assert r.json()["error"]["code"] == "internal_error"   # the endpoint's error shape
    assert_released(gw, handed, engines)
    # a request refused before its scope exists is not accounted, nor one whose accounting broke
    assert _served(gw, "500") == before + (stage not in ("limit", "account"))


def _served(gw, code: str) -> float:
    """inferplane_requests_total of model m with this status code."""
    return sum(s.value for metric in gw.state.metrics.requests.collect() for s in metric.samples
               if s.name.endswith("_total") and s.labels.get("model") == "m"
               and s.labels.get("code") == code)


# -- real failures: engines, admission, clients --------------------------------------------
@pytest.mark.parametrize("fault", [{"fail_status": 500}, {"fail_status": 400}])
def test_engine_errors_release_everything(gw, handed, engines, fault):
    for engine in engines[:2]:
        engine.control(**fault)
    r = _post(gw, json=chat_body("m"))
    assert r.status_code == (502 if fault["fail_status"] == 500 else 400), r.text
    assert_released(gw, handed, engines)


def test_a_stream_broken_mid_way_releases_everything(gw, handed, engines):
    engines[2].control(break_after=2)
    with gw.client("admin") as c:
        body = c.post("/v1/chat/completions",
                      json=chat_body("stream", stream=True, max_tokens=8)).content
    assert b"mid-stream" in body and body.endswith(b"data: [DONE]\n\n")
    assert_released(gw, handed, engines)


def test_a_client_leaving_mid_stream_releases_everything(gw, handed, engines):
    engines[2].control(token_delay=0.2)
    with gw.client("admin") as c, c.stream("POST", "/v1/chat/completions", json=chat_body(
            "stream", stream=True, max_tokens=50)) as r:
        next(r.iter_raw())   # the first chunk, then the client goes
    assert_released(gw, handed, engines, timeout=5)
    assert engines[2].stats()["cancelled"] == 1


def test_a_client_leaving_before_the_first_token_releases_everything(gw, handed, engines):
    engines[2].control(first_token_delay=2.0)
    with pytest.raises(httpx.ReadTimeout):
        _post(gw, json=chat_body("stream", stream=True), timeout=0.3)
    assert_released(gw, handed, engines, timeout=5)


def test_a_queue_timeout_and_a_full_queue_release_everything(gw, handed, engines):
    """One slot on the backend: a slow request holds it, the next waits and times out."""
    engines[2].control(token_delay=0.3)
    with gw.client("admin") as c, c.stream("POST", "/v1/chat/completions", json=chat_body(
            "stream", stream=True, max_tokens=4)) as slow:
        waiting = _post(gw, json=chat_body("stream"))
        assert waiting.status_code in (429, 503), waiting.text
        assert waiting.json()["error"]["code"] in ("queue_timeout", "queue_full")
        slow.read()
    assert_released(gw, handed, engines)


def _team_spend(team: str) -> tuple[float, float]:
    """(settled, held) USD on the team's lifetime counter, read from Redis directly."""
    async def read():
        tracker = create_spend_tracker(REDIS_URL)
        try:
            return await tracker._get(Budget("team", team, None).counter(None).key)
        finally:
            await tracker.close()
    return asyncio.run(read()) or (0.0, 0.0)


def test_redis_limits_and_budgets_are_released(engines, handed):
    """The Redis limiter and spend tracker: a failed request's hold is gone from Redis, a
    served one's is swapped for its cost."""
    team = f"leak-{uuid.uuid4().hex[:8]}"   # counters of its own in the shared Redis
    gw, server, thread = _gateway(engines, redis_url=REDIS_URL)
    spender = key("user", max_budget=50.0, tpm=100_000, team=team)
    gw.source.current = snapshot(gw.source.current.models.values(), _keys(**{
        spender.key_hash: spender}))
    try:
        for engine in engines[:2]:
            engine.control(fail_status=500)
        assert _post(gw, key_name="user", json=chat_body("m")).status_code == 502
        assert_released(gw, handed, engines)
        assert _team_spend(team) == (0.0, 0.0)
        for engine in engines[:2]:
            engine.control(reset=True)
        assert _post(gw, key_name="user", json=chat_body("m")).status_code == 200
        assert_released(gw, handed, engines)
        settled, held = _team_spend(team)
        assert settled > 0 and held == 0
        assert len(handed.limits) == 2
    finally:
        server.should_exit = True
        thread.join(timeout=10)

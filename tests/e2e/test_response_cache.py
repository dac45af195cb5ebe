"""The response cache end to end: `inferplane up` with the real all-minilm-l6-v2 embedding
engine, a cached model on fake OpenAI engines (to count engine calls), set up through the
admin API. Identical requests skip the engine, streams replay as SSE read by the official
openai SDK, another team misses, moving the alias misses, paraphrases hit the semantic
cache and unrelated questions do not, and hits show in the request log, the usage report
and /metrics."""
from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI

from common.metric_names import Metric
from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import metric_sum, samples
from tests.gateway.conftest import start_engine

MODEL = "cached"
HEADER = "x-inferplane-cache"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def engines():
    started = [start_engine("c0"), start_engine("c1")]
    yield started
    for engine in started:
        engine.proc.terminate()
        engine.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, engines):
    work = tmp_path_factory.mktemp("cache-up")
    config = {"engine_port_base": free_port(),
              "models": [{"name": "all-minilm-l6-v2", "task": "embedding"}]}
    with running_up(work, config) as (base, admin_key, _proc):
        admin = httpx.Client(base_url=base, timeout=30, trust_env=False,
                             headers={"Authorization": f"Bearer {admin_key}"})
        policy = {"exact": True, "semantic": True, "threshold": 0.85, "price_per_1k": 0.1}
        _ok(admin.post("/admin/v1/models", json={"name": MODEL, "cache": policy}))
        for label, engine in (("v1", engines[0]), ("v2", engines[1])):
            _ok(admin.post(f"/admin/v1/models/{MODEL}/versions", json={"version": label}))
            _ok(admin.post("/admin/v1/backends", json={
                "model": MODEL, "version": label, "url": engine.url, "state": "ready",
                "served_model": "served-m"}))
        _ok(admin.put(f"/admin/v1/models/{MODEL}/aliases/default", json={"version": "v1"}))
        keys = {}
        for team in ("red", "blue"):
            _ok(admin.post("/admin/v1/teams", json={"name": team}))
            keys[team] = _ok(admin.post("/admin/v1/keys", json={"name": team, "team": team}))
        _wait_served(base, keys["red"]["secret"])
        yield {"base": base, "admin": admin, "keys": keys}
        admin.close()


def _ok(resp: httpx.Response) -> dict:
    assert resp.status_code in (200, 201), resp.text
    return resp.json()


def _wait_served(base: str, secret: str) -> None:
    deadline = time.monotonic() + 60   # the gateway sees the model with its next snapshot
    while True:
        r = httpx.post(f"{base}/v1/embeddings", headers={"Authorization": f"Bearer {secret}"},
                       json={"model": "all-minilm-l6-v2", "input": "warm up"}, timeout=30)
        m = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {secret}"})
        if r.status_code == 200 and MODEL in {x["id"] for x in m.json().get("data", [])}:
            return
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)


def ask(stack, content: str, team: str = "red", **extra) -> httpx.Response:
    return httpx.post(f"{stack['base']}/v1/chat/completions", timeout=30, headers={
        "Authorization": f"Bearer {stack['keys'][team]['secret']}"}, json={
        "model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
        "max_tokens": 4, **extra})


def test_an_identical_request_does_not_reach_the_engine(stack, engines):
    before = engines[0].stats()["requests"]
    first, second = ask(stack, "Say hello."), ask(stack, "Say hello.")
    assert (first.headers[HEADER], second.headers[HEADER]) == ("miss", "hit")
    assert second.json()["choices"] == first.json()["choices"]
    assert engines[0].stats()["requests"] == before + 1


def test_a_stream_replays_through_the_openai_sdk(stack, engines):
    client = OpenAI(base_url=stack["base"] + "/v1", max_retries=0,
                    api_key=stack["keys"]["red"]["secret"])
    before = engines[0].stats()["requests"]
    seen = []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Stream please."}],
            temperature=0, max_tokens=3, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        seen.append((raw.headers.get(HEADER), text))
    assert seen == [("miss", "tok0 tok1 tok2 "), ("hit", "tok0 tok1 tok2 ")]
    assert engines[0].stats()["requests"] == before + 1


def test_another_team_does_not_see_the_answer(stack):
    assert ask(stack, "Team question.").headers[HEADER] == "miss"
    assert ask(stack, "Team question.", team="blue").headers[HEADER] == "miss"
    assert ask(stack, "Team question.", team="blue").headers[HEADER] == "hit"


def test_paraphrases_hit_and_unrelated_questions_miss(stack, engines):
    before = engines[0].stats()["requests"]
    assert ask(stack, QUESTION).headers[HEADER] == "miss"
    paraphrase = ask(stack, "Which city is the capital of France?")
    assert paraphrase.headers[HEADER] == "hit", paraphrase.text
    assert ask(stack, "How do I bake sourdough bread?").headers[HEADER] == "miss"
    assert ask(stack, "Which city is the capital of France?",
               team="blue").headers[HEADER] == "miss"       # never across tenants
    assert engines[0].stats()["requests"] == before + 3   # the paraphrase did not reach it


def test_hits_are_accounted(stack):
    admin = stack["admin"]
    deadline = time.monotonic() + 30   # the usage writer flushes in batches
    while True:
        rows = admin.get("/admin/v1/requests", params={"model": MODEL, "limit": 200}).json()
        caches = [r.get("cache") for r in rows["data"]]
        usage = admin.get("/admin/v1/usage", params={"group_by": "model",
                                                     "model": MODEL}).json()
        hits = usage["totals"].get("cache_hits", 0)
        if caches.count("hit") >= 4 and hits >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert caches.count("hit") >= 4 and caches.count("miss") >= 4, caches
    assert hits == caches.count("hit")
    values = samples(httpx.get(stack["base"] + "/metrics").text)
    assert metric_sum(values, Metric.CACHE_REQUESTS.total, model=MODEL, result="hit") >= 3
    assert metric_sum(values, Metric.CACHE_REQUESTS.total, model=MODEL,
                      result="semantic_hit") >= 1


def test_moving_the_alias_misses(stack, engines):
    assert ask(stack, "Versioned question.").headers[HEADER] == "miss"
    assert ask(stack, "Versioned question.").headers[HEADER] == "hit"
    before = engines[1].stats()["requests"]
    _ok(stack["admin"].put(f"/admin/v1/models/{MODEL}/aliases/default", json={"version": "v2"}))
    deadline = time.monotonic() + 30
    while (reply := ask(stack, "Versioned question.")).headers[HEADER] == "hit":
        assert time.monotonic() < deadline, "the alias move never reached the gateway"
        time.sleep(0.3)
    assert reply.headers[HEADER] == "miss"
    assert engines[1].stats()["requests"] == before + 1

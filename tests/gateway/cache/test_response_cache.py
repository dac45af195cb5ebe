"""The response cache through a real gateway in front of fake engines: hits skip the engine
and still pass limits and accounting, streams replay as SSE (read by the official openai
SDK), tenants and versions never share answers, cache-control is obeyed, and with Redis two
gateways share their entries."""
from __future__ import annotations

import time
import uuid
from dataclasses import replace

import openai
import pytest

from registry.cache_policy import CachePolicy
from registry.snapshot import SplitView
from tests.gateway.conftest import KEYS, backend, chat_body, key, model, snapshot

REDIS_URL = "redis://127.0.0.1:6379/0"
HEADER = "x-inferplane-cache"


def cached_model(engine, name="m", **policy):
    return replace(model(name, [backend(engine)]), cache=CachePolicy(**policy))


def ask(client, name="m", **extra):
    return client.post("/v1/chat/completions",
                       json=chat_body(name, **{"temperature": 0, "max_tokens": 4, **extra}))


def wait_until_kept(gw, timeout: float = 10.0) -> None:
    """A miss's answer is stored off the request path: with Redis, the client can have the
    response before the write is done. Wait for the gateway's pending writes."""
    deadline = time.monotonic() + timeout
    while gw.state.cache.pending:
        assert time.monotonic() < deadline, "the answer was never stored"
        time.sleep(0.01)


def usage_of(gw) -> list:
    records = []
    gw.state.usage_sinks.append(records.append)
    return records


def test_the_second_identical_request_is_answered_from_the_cache(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0], price_per_1k=0.5)])
    records = usage_of(gw)
    with gw.client() as client:
        first, second = ask(client), ask(client)
    assert first.status_code == second.status_code == 200, second.text
    assert first.headers[HEADER] == "miss" and second.headers[HEADER] == "hit"
    assert engines[0].stats()["requests"] == 1
    assert second.json()["choices"] == first.json()["choices"]
    assert second.json()["model"] == "m" and second.json()["usage"] == first.json()["usage"]
    assert [r.cache for r in records] == ["miss", "hit"]
    hit = records[1]
    assert hit.backend is None and hit.status == "ok"
    tokens = hit.prompt_tokens + hit.completion_tokens
    assert tokens > 0 and hit.cost_usd == pytest.approx(tokens / 1000 * 0.5)


def test_a_hit_still_counts_against_the_rate_limit(engines, make_gateway):
    keys = {k.key_hash: k for k in [key("user", rpm=2)]}
    gw = make_gateway([cached_model(engines[0])], keys=keys)
    with gw.client() as client:
        assert ask(client).status_code == 200
        assert ask(client).headers[HEADER] == "hit"
        assert ask(client).status_code == 429


def test_uncached_requests_carry_no_header(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0]), model("plain", [backend(engines[1])])])
    records = usage_of(gw)
    with gw.client() as client:
        sampled = [client.post("/v1/chat/completions", json=chat_body("m", max_tokens=3))
                   for _ in range(2)]     # temperature 1 by default: may differ, not cached
        plain = ask(client, "plain")
    assert all(HEADER not in r.headers for r in [*sampled, plain])
    assert engines[0].stats()["requests"] == 2
    assert [r.cache for r in records] == [None, None, None]


def test_sampled_requests_are_cached_when_the_policy_allows(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0], deterministic_only=False)])
    with gw.client() as client:
        replies = [client.post("/v1/chat/completions", json=chat_body("m", max_tokens=3))
                   for _ in range(2)]
    assert [r.headers[HEADER] for r in replies] == ["miss", "hit"]


def test_a_stream_is_replayed_as_a_stream(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0])])
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEYS["user"], max_retries=0)
    texts, headers = [], []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hello"}], temperature=0,
            max_tokens=4, stream=True, stream_options={"include_usage": True})
        headers.append(raw.headers.get(HEADER))
        chunks = list(raw.parse())
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
        assert all(c.model == "m" for c in chunks)
    assert headers == ["miss", "hit"]
    assert texts[0] == texts[1] == "tok0 tok1 tok2 tok3 "
    assert engines[0].stats()["requests"] == 1
    # a non-streamed request is a different entry (a stored stream does not answer it)
    with gw.client() as http:
        assert ask(http).headers[HEADER] == "miss"


def test_another_team_misses(engines, make_gateway):
    keys = {k.key_hash: k for k in [key("user", team="team-a"),
                                    key("admin", role="admin", team="team-b")]}
    gw = make_gateway([cached_model(engines[0])], keys=keys)
    with gw.client("user") as a, gw.client("admin") as b:
        assert ask(a).headers[HEADER] == "miss"
        assert ask(b).headers[HEADER] == "miss"
        assert ask(b).headers[HEADER] == "hit"
    assert engines[0].stats()["requests"] == 2


def test_moving_the_version_misses(engines, make_gateway):
    both = [backend(engines[0], version="v1"), backend(engines[1], version="v2")]
    on = lambda v: replace(model("m", both, splits=(SplitView(v, 1.0),)),
                           cache=CachePolicy())
    gw = make_gateway([on("v1")])
    with gw.client() as client:
        assert ask(client).headers[HEADER] == "miss"
        assert ask(client).headers[HEADER] == "hit"
        gw.source.current = snapshot([on("v2")], version=2)
        assert ask(client).headers[HEADER] == "miss"
    assert engines[0].stats()["requests"] == 1 and engines[1].stats()["requests"] == 1


def test_cache_control_no_cache_refreshes_and_no_store_keeps_out(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0])])
    with gw.client() as client:
        ask(client)
        fresh = client.post("/v1/chat/completions", headers={"cache-control": "no-cache"},
                            json=chat_body("m", temperature=0, max_tokens=4))
        assert fresh.headers[HEADER] == "miss" and engines[0].stats()["requests"] == 2
        kept_out = client.post("/v1/chat/completions", headers={"cache-control": "no-store"},
                               json=chat_body("m", temperature=0, max_tokens=5))
        assert kept_out.headers[HEADER] == "miss"
        assert ask(client, max_tokens=5).headers[HEADER] == "miss"   # it was not stored
        bypass = client.post("/v1/chat/completions",
                             headers={"cache-control": "no-cache, no-store"},
                             json=chat_body("m", temperature=0, max_tokens=4))
        assert HEADER not in bypass.headers
    assert engines[0].stats()["requests"] == 5


def test_an_engine_error_is_not_stored(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0])], retries=0)
    with gw.client() as client:
        engines[0].control(fail_status=500)
        assert ask(client).status_code == 502
        engines[0].control(fail_status=None)
        assert ask(client).headers[HEADER] == "miss"
        assert ask(client).headers[HEADER] == "hit"


def test_gateways_share_entries_through_redis(engines, make_gateway):
    name = f"m-{uuid.uuid4().hex[:8]}"      # a fresh model: no entry from an earlier run
    models = [cached_model(engines[0], name=name)]
    one = make_gateway(models, redis_url=REDIS_URL)
    two = make_gateway(models, redis_url=REDIS_URL)
    with one.client() as a, two.client() as b:
        assert ask(a, name).headers[HEADER] == "miss"
        wait_until_kept(one)
        reply = ask(b, name)
        assert reply.headers[HEADER] == "hit", reply.text
    assert engines[0].stats()["requests"] == 1


def test_a_chat_answer_replays_in_the_responses_and_anthropic_shapes(engines, make_gateway):
    gw = make_gateway([cached_model(engines[0])])
    with gw.client() as client:
        body = {"model": "m", "input": "hello", "temperature": 0, "max_output_tokens": 4}
        first, second = (client.post("/v1/responses", json=body) for _ in range(2))
        assert second.headers[HEADER] == "hit", second.text
        contents = [r.json()["output"][0]["content"] for r in (first, second)]
        assert contents[0] == contents[1] and contents[0][0]["text"] == "tok0 tok1 tok2 tok3 "
        assert first.json()["id"] != second.json()["id"]   # a response of its own
        streamed = [client.post("/v1/responses", json={**body, "stream": True})
                    for _ in range(2)]
        assert [r.headers[HEADER] for r in streamed] == ["miss", "hit"]
        events = [[line for line in r.text.splitlines() if line.startswith("event:")]
                  for r in streamed]
        assert events[0] == events[1] and events[1][-1] == "event: response.incomplete"
        assert streamed[0].text.count("response.output_text.delta") == \
            streamed[1].text.count("response.output_text.delta") > 0
        anthropic = {"model": "m", "max_tokens": 4, "temperature": 0,
                     "messages": [{"role": "user", "content": "hello"}]}
        # the same engine request as the Responses one above: its stored answer serves it
        reply = client.post("/v1/messages", json=anthropic)
        assert reply.headers[HEADER] == "hit", reply.text
        assert reply.json()["content"] == [{"type": "text", "text": "tok0 tok1 tok2 tok3 "}]
    assert engines[0].stats()["requests"] == 2

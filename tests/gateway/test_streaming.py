"""Streaming relay: pass-through, usage handling, model naming, disconnect cancels upstream."""
import time

import orjson
import pytest

from common.metric_names import Metric
from tests.gateway.conftest import backend, chat_body, model


@pytest.fixture
def gw(make_gateway, engines):
    return make_gateway([model("m", [backend(engines[0])])])


def events(response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


def content(evts) -> str:
    return "".join((e["choices"][0].get("delta") or {}).get("content") or ""
                   for e in evts if isinstance(e, dict) and e.get("choices"))


def test_stream_passes_tokens_and_strips_usage_when_not_asked(gw, engines):
    with gw.client() as c, c.stream("POST", "/v1/chat/completions",
                                    json=chat_body(stream=True, max_tokens=4)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        evts = events(r)
    assert evts[-1] == "[DONE]"
    assert content(evts) == "tok0 tok1 tok2 tok3 "
    assert not any(isinstance(e, dict) and e.get("usage") for e in evts)
    assert all(e["model"] == "m" for e in evts if isinstance(e, dict))  # not "served-m"
    sent = engines[0].stats()["last_body"]
    assert sent["stream_options"]["include_usage"] is True and sent["model"] == "served-m"


def test_stream_keeps_usage_when_asked(gw):
    body = chat_body(stream=True, max_tokens=3, stream_options={"include_usage": True})
    with gw.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        evts = events(r)
    usage = [e["usage"] for e in evts if isinstance(e, dict) and e.get("usage")]
    assert usage == [{"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}]


def test_non_stream_has_usage_and_passthrough_params(gw, engines):
    body = chat_body(max_completion_tokens=3, top_k=5, ignore_eos=True, min_tokens=1, seed=7,
                     stop=["x"], user="u1")
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    data = r.json()
    assert r.status_code == 200
    assert data["usage"]["completion_tokens"] == 3 and data["model"] == "m"
    sent = engines[0].stats()["last_body"]
    assert (sent["top_k"], sent["ignore_eos"], sent["min_tokens"], sent["seed"]) == (5, True, 1, 7)
    assert sent["max_tokens"] == 3


def test_completions_stream_and_non_stream(gw):
    with gw.client() as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "a b", "max_tokens": 2})
        with c.stream("POST", "/v1/completions",
                      json={"model": "m", "prompt": "a b", "max_tokens": 2, "stream": True}) as s:
            evts = events(s)
    assert r.json()["choices"][0]["text"] == "tok0 tok1 " and r.json()["usage"]["total_tokens"] == 5
    assert "".join(e["choices"][0]["text"] for e in evts if isinstance(e, dict)) == "tok0 tok1 "


def test_client_disconnect_cancels_upstream(gw, engines):
    engines[0].control(token_delay=0.05)
    with gw.client() as c, c.stream("POST", "/v1/chat/completions",
                                    json=chat_body(stream=True, max_tokens=400)) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
    deadline = time.monotonic() + 5
    while engines[0].stats()["cancelled"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = engines[0].stats()
    assert stats["cancelled"] == 1 and stats["completed"] == 0
    assert gw.state.router.book.inflight.get("e0", 0) == 0
    time.sleep(0.2)  # the accounting of a left stream completes after its cancellation
    counts = [line for line in gw.client().get("/metrics").text.splitlines()
              if line.startswith(Metric.REQUESTS.total)]
    assert any('code="499"' in line for line in counts), counts


def test_client_disconnect_before_first_token_cancels_upstream(gw, engines):
    import httpx
    engines[0].control(first_token_delay=3.0)
    with gw.client(timeout=0.5) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/chat/completions", json=chat_body())
    deadline = time.monotonic() + 5
    while engines[0].stats()["cancelled"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engines[0].stats()["cancelled"] == 1


def test_stream_broken_midway_ends_with_error_event(gw, engines):
    engines[0].control(break_after=2)
    with gw.client() as c, c.stream("POST", "/v1/chat/completions",
                                    json=chat_body(stream=True, max_tokens=10)) as r:
        assert r.status_code == 200
        evts = events(r)
    assert content(evts) == "tok0 tok1 "
    assert evts[-1] == "[DONE]"
    assert set(evts[-2]["error"]) == {"message", "type", "param", "code"}
    metrics = gw.client().get("/metrics").text
    assert f'{Metric.REQUESTS.total}{{code="502",model="m",version="v1"}} 1.0' in metrics

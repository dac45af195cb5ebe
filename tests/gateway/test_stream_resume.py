"""A stream whose backend dies mid-way continues on another backend when the request allows it."""
import orjson
import pytest

from common.metric_names import Metric
from gateway.apis.chat.endpoint import CHAT
from gateway.apis.completions.endpoint import COMPLETION
from gateway.request_path.resume import continuation_body, may_resume
from tests.gateway.conftest import backend, chat_body, model
from tests.gateway.test_streaming import content, events


@pytest.fixture
def gw(make_gateway, engines):
    return make_gateway([model("m", [backend(engines[0]), backend(engines[1])])])


def stream(gw, path: str, body: dict) -> list:
    with gw.client() as c, c.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        return events(r)


def test_greedy_chat_continues_on_another_backend(gw, engines):
    engines[0].control(break_after=2)
    engines[1].control(break_after=None)
    evts = stream(gw, "/v1/chat/completions", chat_body(
        stream=True, max_tokens=10, temperature=0, stream_options={"include_usage": True}))
    # round robin: e0 served first and broke after two tokens; e1 continued with the rest
    assert evts[-1] == "[DONE]" and not any("error" in e for e in evts if isinstance(e, dict))
    assert content(evts) == "tok0 tok1 " + "".join(f"tok{i} " for i in range(8))
    sent = engines[1].stats()["last_body"]
    assert sent["messages"][-1] == {"role": "assistant", "content": "tok0 tok1 "}
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    assert sent["max_tokens"] == 8
    usage = next(e["usage"] for e in evts if isinstance(e, dict) and e.get("usage"))
    assert usage["completion_tokens"] == 10  # 2 sent before the break + 8 after
    assert usage["prompt_tokens"] == 2       # the fake engine's count of "hello", not the partial
    roles = [e for e in evts if isinstance(e, dict) and e.get("choices")
             and "role" in e["choices"][0]["delta"]]
    assert len(roles) == 1                   # the continuation's role chunk is not repeated
    metrics = gw.client().get("/metrics").text
    assert f'{Metric.REQUESTS.total}{{code="200",model="m",version="v1"}} 1.0' in metrics
    # the dropped connection reads as a stream that ended before [DONE]
    assert f'{Metric.STREAM_RESUMES.total}{{kind="protocol",model="m"}} 1.0' in metrics


def test_completion_continues_with_the_prompt_extended(gw, engines):
    engines[0].control(break_after=3)
    evts = stream(gw, "/v1/completions", {"model": "m", "prompt": "Say:", "stream": True,
                                          "max_tokens": 5, "temperature": 0})
    text = "".join(e["choices"][0]["text"] for e in evts if isinstance(e, dict) and e["choices"])
    assert text == "tok0 tok1 tok2 tok0 tok1 "
    assert engines[1].stats()["last_body"]["prompt"] == "Say:tok0 tok1 tok2 "


def test_sampled_request_is_not_resumed_by_default(gw, engines):
    engines[0].control(break_after=2)
    evts = stream(gw, "/v1/chat/completions", chat_body(stream=True, max_tokens=10))
    assert content(evts) == "tok0 tok1 " and "error" in evts[-2]
    assert engines[1].stats()["requests"] == 0


def test_which_requests_may_resume():
    chat = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    assert may_resume("greedy", CHAT, chat)
    assert not may_resume("greedy", CHAT, {**chat, "temperature": 0.7})
    assert may_resume("always", CHAT, {**chat, "temperature": 0.7})
    assert not may_resume("off", CHAT, chat)
    assert not may_resume("always", CHAT, {**chat, "logprobs": True})
    assert not may_resume("always", COMPLETION, {"prompt": [1, 2, 3]})
    body = continuation_body(CHAT, {**chat, "max_completion_tokens": 4}, "ab", 4)
    assert body is None  # nothing left to generate
    assert orjson.dumps(continuation_body(COMPLETION, {"prompt": "x", "min_tokens": 3},
                                          "yz", 2)) == b'{"prompt":"xyz","min_tokens":1}'

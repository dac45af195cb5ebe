"""The OpenAI API through the gateway in front of a real vLLM: chat and completions, streamed and
not, usage, stop, seeds, and vLLM's refusals in the OpenAI error shape."""
from __future__ import annotations

import httpx
import orjson
import pytest

from tests.peers.conftest import backend_of, gateway, model_of

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gw(vllm):
    with gateway([model_of([backend_of(vllm, "vllm-0")])]) as running:
        yield running


@pytest.fixture(scope="module")
def client(gw):
    with gw.client(timeout=120) as c:
        yield c


def counts(usage: dict) -> tuple:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


def sse(client: httpx.Client, path: str, body: dict) -> list:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [orjson.loads(line) for line in lines[:-1]]


def chat(client, **extra) -> dict:
    r = client.post("/v1/chat/completions", json={"model": "m", "messages": QUESTION,
                                                  "temperature": 0, "max_tokens": 16, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_answers_with_usage(client):
    reply = chat(client)
    assert reply["object"] == "chat.completion" and reply["model"] == "m"
    text = reply["choices"][0]["message"]["content"]
    assert "Paris" in text
    usage = reply["usage"]
    assert usage["prompt_tokens"] > 5 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_streamed_chat_is_the_same_text_and_usage(client):
    whole = chat(client)
    events = sse(client, "/v1/chat/completions", {
        "model": "m", "messages": QUESTION, "temperature": 0, "max_tokens": 16,
        "stream_options": {"include_usage": True}})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert all(e["model"] == "m" for e in events)
    assert counts(events[-1]["usage"]) == counts(whole["usage"])
    finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert finish[-1] == whole["choices"][0]["finish_reason"]


def test_completions_streamed_and_not(client):
    body = {"model": "m", "prompt": "The capital of France is", "temperature": 0, "max_tokens": 8}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    whole = r.json()
    assert whole["object"] == "text_completion"
    assert whole["usage"]["completion_tokens"] == 8  # nothing stops it in 8 tokens
    events = sse(client, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == \
        whole["choices"][0]["text"]
    assert counts(events[-1]["usage"]) == counts(whole["usage"])


def test_stop_string_ends_the_answer_before_it(client):
    text = chat(client, max_tokens=24)["choices"][0]["message"]["content"]
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    reply = chat(client, max_tokens=24, stop=[stop])
    cut = reply["choices"][0]["message"]["content"]
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert stop not in cut and text.startswith(cut)


def test_seed_reproduces_a_sampled_answer(client):
    def sampled(seed: int) -> str:
        return chat(client, temperature=1.0, max_tokens=24, seed=seed)["choices"][0]["message"][
            "content"]

    first = sampled(7)
    assert sampled(7) == first
    assert any(sampled(seed) != first for seed in (8, 9, 10))


def test_too_long_prompt_is_a_400_in_openai_shape(client):
    r = client.post("/v1/completions", json={"model": "m", "prompt": "word " * 3000,
                                             "max_tokens": 4})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert "2048" in error["message"] or "context" in error["message"].lower()


@pytest.mark.parametrize("bad", [{"max_tokens": -3}, {"temperature": "hot"}, {"n": 0},
                                 {"top_logprobs": 99, "logprobs": True}])
def test_bad_parameters_are_400_in_openai_shape(client, bad):
    r = client.post("/v1/chat/completions", json={"model": "m", "messages": QUESTION, **bad})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"

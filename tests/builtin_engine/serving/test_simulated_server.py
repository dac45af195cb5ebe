"""The engine's HTTP layer over the simulated executor: real scheduler, real tokenizer, real HTTP
(uvicorn in a subprocess), synthetic tokens."""
from __future__ import annotations

import httpx
import orjson
import pytest

from tests.conftest import free_port, start_process, stop_process, wait_http

NAME = "sim-model"


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("sim") / "engine.log"
    proc = start_process(["-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
                          "--served-model-name", NAME, "--sim-decode-base-s", "0.001",
                          "--sim-prefill-s-per-token", "0", "--sim-context-length", "512",
                          "--num-blocks", "256"], log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def _chat(url, **body):
    body.setdefault("model", NAME)
    body.setdefault("messages", [{"role": "user", "content": "hello there"}])
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30)


def _stream_events(url, path, body):
    with httpx.stream("POST", url + path, json=body, timeout=30) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [orjson.loads(line[6:]) for line in lines[:-1]]


def test_max_tokens_and_usage(engine_url):
    body = _chat(engine_url, max_tokens=7, ignore_eos=True).json()
    assert body["usage"]["completion_tokens"] == 7
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 7


def test_stream_equals_non_stream_and_reports_usage(engine_url):
    base = {"model": NAME, "messages": [{"role": "user", "content": "count"}], "max_tokens": 20,
            "seed": 7, "ignore_eos": True}
    full = _chat(engine_url, **base).json()
    events = _stream_events(engine_url, "/v1/chat/completions",
                            {**base, "stream": True, "stream_options": {"include_usage": True}})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == full["choices"][0]["message"]["content"]
    assert events[-1]["usage"]["completion_tokens"] == 20
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"


def test_completions_endpoint(engine_url):
    resp = httpx.post(engine_url + "/v1/completions",
                      json={"model": NAME, "prompt": "abc", "max_tokens": 3, "ignore_eos": True})
    body = resp.json()
    assert resp.status_code == 200 and body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("body,status", [
    ({"messages": []}, 400),
    ({"messages": "hi"}, 400),
    ({"max_tokens": 0}, 400),
    ({"max_tokens": 10_000}, 400),  # beyond the 512-token context
    ({"n": 3}, 400),
    ({"temperature": 5}, 400),
    ({"model": "other"}, 404),
])
def test_errors_use_openai_shape(engine_url, body, status):
    resp = _chat(engine_url, **body)
    assert resp.status_code == status
    assert set(resp.json()["error"]) == {"message", "type", "param", "code"}


def test_malformed_json_is_400(engine_url):
    resp = httpx.post(engine_url + "/v1/chat/completions", content=b"{not json",
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["message"]
    assert resp.json()["error"]["param"] is None


@pytest.mark.parametrize("field,value", [("prompt_logprobs", 1), ("audio", {"voice": "alloy"}),
    ("modalities", ["text", "audio"]), ("prediction", {"type": "content", "content": "x"}),
])
def test_unsupported_features_are_refused_not_ignored(engine_url, field, value):
    resp = _chat(engine_url, **{field: value, "max_tokens": 2})
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["param"] == field
    assert error["code"] == "unsupported_parameter" and "vLLM" in error["message"]


@pytest.mark.parametrize("field,body", [
    ("response_format", {"response_format": {"type": "json_object"}}),
    ("tools", {"tools": [{"type": "function", "function": {"name": "f"}}],
               "tool_choice": "required"}),
])
def test_structured_output_needs_the_real_model(engine_url, field, body):
    """Grammars mask real logits; the simulator's tokens are synthetic (tests/builtin_engine/structured
    covers the real model)."""
    resp = _chat(engine_url, max_tokens=2, **body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == field


def test_logprobs_options_are_checked(engine_url):
    resp = _chat(engine_url, max_tokens=2, top_logprobs=3)
    assert resp.status_code == 400 and "needs logprobs=true" in resp.json()["error"]["message"]
    assert _chat(engine_url, max_tokens=2, logprobs=True, top_logprobs=21).status_code == 400
    resp = httpx.post(engine_url + "/v1/completions", json={
        "model": NAME, "prompt": "hi", "max_tokens": 2, "echo": True, "logprobs": 1}, timeout=30)
    assert resp.status_code == 400 and "echo" in resp.json()["error"]["message"]


def test_harmless_values_of_unsupported_fields_pass(engine_url):
    resp = _chat(engine_url, max_tokens=2, logprobs=False, tool_choice="none",
                 response_format={"type": "text"}, modalities=["text"])
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "file", "file": {"file_id": "file-1"}},
])
def test_non_text_content_parts_are_refused_by_a_text_only_engine(engine_url, part):
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "describe"}, part]}]
    resp = _chat(engine_url, max_tokens=2, messages=messages)
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["param"] == "messages[1].content[1]"
    assert part["type"] in error["message"] and error["code"] == "unsupported_parameter"
    text_parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert _chat(engine_url, max_tokens=2, messages=text_parts).status_code == 200


def test_prompt_logprobs_and_stream_options_without_stream_are_refused(engine_url):
    resp = httpx.post(engine_url + "/v1/completions", timeout=30, json={
        "model": NAME, "prompt": "hi", "max_tokens": 2, "prompt_logprobs": 2})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt_logprobs"
    resp = _chat(engine_url, max_tokens=2, stream_options={"include_usage": True})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream_options"


def test_penalties_are_accepted_within_their_ranges(engine_url):
    ok = _chat(engine_url, max_tokens=2, presence_penalty=0.5, frequency_penalty=-1,
               repetition_penalty=1.2)
    assert ok.status_code == 200, ok.text
    for field, value in (("presence_penalty", 3), ("frequency_penalty", -2.5),
                         ("repetition_penalty", 0)):
        resp = _chat(engine_url, max_tokens=2, **{field: value})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == field


def test_logit_bias_is_checked_and_lone_surrogates_are_text(engine_url):
    resp = _chat(engine_url, max_tokens=2, logit_bias={"99999999": 5})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "logit_bias"
    assert _chat(engine_url, max_tokens=2, logit_bias={"1": 101}).status_code == 400
    assert _chat(engine_url, max_tokens=2, logit_bias={"12": -100}).status_code == 200
    lone = b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    resp = httpx.post(engine_url + "/v1/chat/completions", content=lone % NAME.encode(),
                      headers={"content-type": "application/json"}, timeout=30)
    assert resp.status_code == 200, resp.text


def test_models_metrics_and_kv_summary(engine_url):
    assert httpx.get(engine_url + "/v1/models").json()["data"][0]["id"] == NAME
    metrics = httpx.get(engine_url + "/metrics").text
    assert "vllm:num_requests_running" in metrics
    summary = httpx.get(engine_url + "/kv/summary").json()
    assert summary["num_blocks"] == 256 and "num_free_blocks" in summary


def test_tokenize_matches_chat_prompt_length(engine_url):
    messages = [{"role": "user", "content": "hello there"}]
    tokens = httpx.post(engine_url + "/tokenize", json={"messages": messages}).json()
    usage = _chat(engine_url, messages=messages, max_tokens=1).json()["usage"]
    assert tokens["count"] == usage["prompt_tokens"] == len(tokens["tokens"])
    assert httpx.post(engine_url + "/tokenize", json={}).status_code == 400

"""Structured output and tool calls from the builtin engine: the real SmolLM2 over real HTTP.

One engine process for the module. The property test draws small bounded JSON schemas
(hypothesis) and checks that every answer parses and validates (jsonschema); the tool tests
check named / required tool choice in both the whole-message and the streaming shape.
"""
from __future__ import annotations

import json

import httpx
import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import free_port, start_process, stop_process, wait_http

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 10}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("structured") / "engine.log"
    proc = start_process(["-m", "builtin_engine", "serve", "--model", "smollm2-135m-instruct",
                          "--port", str(port), "--no-compile", "--max-model-len", "1024"],
                         log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=240)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def _chat(url, **body):
    body.setdefault("messages", [{"role": "user", "content": "Describe a person as JSON."}])
    body.setdefault("temperature", 0)
    body.setdefault("max_tokens", 120)
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=180)


def _stream(url, **body):
    body.setdefault("temperature", 0)
    body.setdefault("max_tokens", 120)
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=180) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [orjson.loads(line[6:]) for line in lines[:-1]]


# ---- schemas ----------------------------------------------------------------------------
LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.integers(-50, 50).flatmap(lambda lo: st.integers(lo, lo + 100).map(
        lambda hi: {"type": "integer", "minimum": lo, "maximum": hi})),
    st.integers(1, 8).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(st.sampled_from(["red", "green", "blue", "cyan"]), min_size=1, max_size=3,
             unique=True).map(lambda values: {"enum": values}),
)
NAMES = st.sampled_from(["name", "age", "ok", "tags", "size", "kind"])


def _objects(values):
    return st.dictionaries(NAMES, values, min_size=1, max_size=3).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda required: {"type": "object", "properties": props, "required": required,
                              "additionalProperties": False}))


ARRAYS = LEAVES.flatmap(lambda item: st.integers(1, 2).map(
    lambda n: {"type": "array", "items": item, "maxItems": n}))
SCHEMAS = _objects(st.one_of(LEAVES, ARRAYS, _objects(LEAVES)))


@settings(max_examples=5, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=SCHEMAS)
def test_json_schema_output_always_validates(url, schema):
    resp = _chat(url, max_tokens=200, response_format={
        "type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_json_object_is_an_object(url):
    resp = _chat(url, max_tokens=200, messages=[{"role": "user", "content":
                 'Reply with a JSON object whose key "answer" is the capital of France.'}],
                 response_format={"type": "json_object"})
    assert resp.status_code == 200, resp.text
    content = resp.json()["choices"][0]["message"]["content"]
    assert content.startswith("{")
    if resp.json()["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wrong"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"minLength": "three"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema"}, "response_format"),
    ({"type": "xml"}, "response_format.type"),
])
def test_bad_schemas_are_400_in_the_openai_shape(url, response_format, param):
    resp = _chat(url, response_format=response_format)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_bad_tool_requests_are_400(url):
    bad_params = {"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}
    for body, param in ((dict(tools=[bad_params], tool_choice="required"),
                         "tools[0].function.parameters"),
                        (dict(tools=[WEATHER], tool_choice={"type": "function",
                                                            "function": {"name": "nope"}}),
                         None),
                        (dict(tool_choice="required"), None)):
        resp = _chat(url, messages=ASK, **body)
        assert resp.status_code == 400, resp.text
        assert "message" in resp.json()["error"]
        if param:
            assert resp.json()["error"]["param"] == param


def _check_weather_call(call):
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(call["function"]["arguments"]),
                        WEATHER["function"]["parameters"])


def test_named_tool_choice_whole_message(url):
    resp = _chat(url, messages=ASK, tools=[WEATHER, TIME],
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    _check_weather_call(call)


def test_named_tool_choice_streaming(url):
    events = _stream(url, messages=ASK, tools=[WEATHER, TIME],
                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
    deltas = [d for e in events for d in e["choices"][0]["delta"].get("tool_calls") or ()]
    assert deltas[0]["index"] == 0 and deltas[0]["function"]["name"] == "get_weather"
    assert len(deltas) > 2  # the arguments arrive in pieces
    assert all(d["index"] == 0 for d in deltas) and all("id" not in d for d in deltas[1:])
    arguments = "".join(d["function"].get("arguments", "") for d in deltas)
    _check_weather_call({**deltas[0], "function": {"name": "get_weather",
                                                   "arguments": arguments}})
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_round_trip_renders_calls_and_results(url):
    """An assistant turn with tool_calls and the tool's result go back into the prompt; the
    model then answers in text (tool_choice none) or with a call (required, one only)."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"}]
    tokens = httpx.post(url + "/tokenize", json={"messages": messages}, timeout=30)
    assert tokens.status_code == 200
    resp = _chat(url, messages=messages, tools=[WEATHER], tool_choice="none", max_tokens=30)
    assert resp.status_code == 200, resp.text
    message = resp.json()["choices"][0]["message"]
    assert message["content"] and "tool_calls" not in message
    resp = _chat(url, messages=messages, tools=[WEATHER, TIME], tool_choice="required",
                 parallel_tool_calls=False)
    assert resp.status_code == 200, resp.text
    calls = resp.json()["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 1 and calls[0]["function"]["name"] in ("get_weather", "get_time")
    json.loads(calls[0]["function"]["arguments"])

"""POST/GET/DELETE /v1/responses with the official openai SDK against `inferplane up` and the
real model: create, stream, retrieve, previous_response_id, delete, errors in OpenAI's shape,
and the policy path (keys, rate limits, usage, metrics) as for chat completions."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel

from tests.gateway.apis.conftest import FLAKY, MODEL, engine_faults, new_key
from tests.e2e.faults.conftest import assert_nothing_lost


@pytest.fixture(scope="module")
def client(stack) -> OpenAI:
    return OpenAI(base_url=stack.base + "/v1", api_key=stack.key, max_retries=0)


def test_create_retrieve_and_continue_with_previous_response_id(client):
    first = client.responses.create(model=MODEL, input="What is the capital of France?",
                                    instructions="Answer in one short sentence.",
                                    temperature=0, max_output_tokens=24)
    assert first.id.startswith("resp_") and first.status in ("completed", "incomplete")
    assert "Paris" in first.output_text
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    assert first.instructions == "Answer in one short sentence."
    again = client.responses.retrieve(first.id)
    assert again.id == first.id and again.output_text == first.output_text
    follow = client.responses.create(model=MODEL, input="Repeat the city's name only.",
                                     previous_response_id=first.id, temperature=0,
                                     max_output_tokens=8)
    assert follow.previous_response_id == first.id
    # the stored conversation reached the engine: its prompt is longer than the new input
    assert follow.usage.input_tokens > first.usage.input_tokens
    assert "Paris" in follow.output_text


def test_stream_events_in_order_and_the_final_response_is_stored(client):
    with client.responses.stream(model=MODEL, input="Name three colours.", temperature=0,
                                 max_output_tokens=16) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    # max_output_tokens may end it first: then the API's ending is response.incomplete
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and final.output_text == text and final.usage.output_tokens > 0
    assert final.id == events[0].response.id
    assert client.responses.retrieve(final.id).output_text == text


def test_raw_stream_has_sequence_numbers_and_no_done_marker(stack, client):
    with httpx.stream("POST", stack.base + "/v1/responses", headers=stack.user(), timeout=60,
                      json={"model": MODEL, "input": "Hi", "max_output_tokens": 4,
                            "stream": True}) as r:
        body = r.read().decode()
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in body.splitlines() if line.startswith("data: ")]
    numbers = [json.loads(e[6:])["sequence_number"] for e in events]
    assert numbers == list(range(len(events))) and "[DONE]" not in body


WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
           "strict": True, "parameters": {"type": "object", "additionalProperties": False,
                                          "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}
NAMED = {"type": "function", "name": "get_weather"}


class City(BaseModel):
    name: str
    country: str


def test_function_call_round_trip(client):
    asked = client.responses.create(model=MODEL, input="What is the weather in Paris?",
                                    tools=[WEATHER], tool_choice=NAMED, temperature=0,
                                    max_output_tokens=40)
    calls = [o for o in asked.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    assert asked.tools[0].name == "get_weather"
    result = json.dumps({"temperature_c": 21, "sky": "sunny"})
    answered = client.responses.create(
        model=MODEL, previous_response_id=asked.id, tools=[WEATHER], tool_choice="none",
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": result}],
        temperature=0, max_output_tokens=24)
    assert answered.output_text and not [o for o in answered.output
                                         if o.type == "function_call"]
    # the call and its result reached the engine as chat turns after the question
    alone = client.responses.create(model=MODEL, input="What is the weather in Paris?",
                                    max_output_tokens=1, store=False).usage.input_tokens
    assert answered.usage.input_tokens > alone + 10


def test_function_call_streams_as_argument_deltas(client):
    with client.responses.stream(model=MODEL, input="What is the weather in Oslo?",
                                 tools=[WEATHER], tool_choice=NAMED, temperature=0,
                                 max_output_tokens=40) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and isinstance(json.loads(done[0].arguments)["city"], str)
    final = events[-1].response.output[-1]
    assert final.type == "function_call" and final.arguments == done[0].arguments


def test_responses_parse_with_a_pydantic_model(client):
    parsed = client.responses.parse(model=MODEL, input="Give the capital of France as JSON.",
                                    text_format=City, temperature=0, max_output_tokens=48)
    assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name


def test_chat_completions_parse_with_a_pydantic_model(client):
    parsed = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Give the capital of France as JSON."}],
        response_format=City, temperature=0, max_tokens=48)
    assert isinstance(parsed.choices[0].message.parsed, City)


def test_store_false_delete_and_not_found(client):
    unstored = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2,
                                       store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    stored = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    client.responses.delete(stored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(stored.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, input="Hi", previous_response_id=stored.id)
    assert err.value.body["code"] == "previous_response_not_found"


def test_another_key_cannot_read_or_continue_a_response(stack, client):
    mine = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    other = OpenAI(base_url=stack.base + "/v1", api_key=stack.admin_key, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="Hi", previous_response_id=mine.id)


@pytest.mark.parametrize("body, status, param", [
    ({"model": MODEL}, 400, "input"),
    ({"model": MODEL, "input": "x", "tools": [{"type": "web_search"}]}, 422, "tools.0"),
    ({"model": MODEL, "input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"model": "no-such-model", "input": "x"}, 404, "model"),
])
def test_bad_requests_answer_in_openai_shape(stack, client, body, status, param):
    r = httpx.post(stack.base + "/v1/responses", json=body, headers=stack.user(), timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"] and error.get("param") == param


def test_missing_key_is_a_401(stack):
    r = httpx.post(stack.base + "/v1/responses", json={"model": MODEL, "input": "x"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_usage_spend_and_metrics_are_recorded_like_chat(stack, client):
    before = stack.books(MODEL)
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=4)
    with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=4) as s:
        assert list(s)[-1].type in ("response.completed", "response.incomplete")
    after = assert_nothing_lost(stack, MODEL, before, [200, 200])
    assert after.spend > before.spend


def test_rate_limited_key_gets_429_in_openai_shape(stack):
    client = OpenAI(base_url=stack.base + "/v1", api_key=new_key(stack, rpm_limit=1), max_retries=0)
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    with pytest.raises(openai.RateLimitError) as err:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    assert err.value.body["type"] == "rate_limit_error"


def test_over_budget_key_is_refused_in_openai_shape(stack):
    client = OpenAI(base_url=stack.base + "/v1", api_key=new_key(stack, max_budget=1e-9),
                    max_retries=0)
    with pytest.raises(openai.RateLimitError) as err:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=8)
    assert err.value.body["code"] == "budget_exceeded"


def test_engine_failure_mid_stream_ends_with_response_failed(up, client):
    _, control = up
    with engine_faults(control, break_after=2):
        with client.responses.stream(model=FLAKY, input="Hi", max_output_tokens=8) as stream:
            events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and events[-1].response.error.message
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") \
        == "tok0 tok1 "

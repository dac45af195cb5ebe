"""POST/GET/DELETE /v1/responses with the official openai SDK against `inferplane up` and the
real model: create, stream, retrieve, previous_response_id, delete, errors in OpenAI's shape,
and the policy path (keys, rate limits, usage, metrics) as for chat completions."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI

from tests.client_apis.conftest import new_key
from tests.conftest import free_port, running_up
from tests.faults.conftest import Stack, assert_nothing_lost

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    config = {"engine_port_base": free_port(),
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 4},
                          "price_in_per_1k": 0.01, "price_out_per_1k": 0.02}]}
    with running_up(tmp_path_factory.mktemp("responses"), config) as (base, key, _):
        yield Stack(base, key)


@pytest.fixture(scope="module")
def client(stack) -> OpenAI:
    stack.create_key()
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
    ({"model": MODEL, "input": "x", "tools": [{"type": "web_search"}]}, 400, "tools.0"),
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

"""POST /v1/messages and /v1/messages/count_tokens with the official anthropic SDK against
`inferplane up` and the real model: create, stream, count_tokens, x-api-key and Bearer auth,
errors in Anthropic's shape, and the policy path (keys, limits, usage, metrics)."""
from __future__ import annotations

import anthropic
import httpx
import pytest
from pydantic import BaseModel

from tests.gateway.apis.conftest import FLAKY, MODEL, engine_faults, new_key
from tests.e2e.faults.conftest import assert_nothing_lost

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}    # this SDK has no sampling arguments: the API still takes them


@pytest.fixture(scope="module")
def client(stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.base, api_key=stack.key, max_retries=0)


def test_create_answers_with_a_message(client):
    message = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION,
                                     system="Answer in one short sentence.", extra_body=GREEDY)
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert message.content[0].type == "text" and "Paris" in message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_stream_matches_the_sdk_event_sequence(client):
    with client.messages.stream(model=MODEL, max_tokens=16, messages=QUESTION,
                                extra_body=GREEDY) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert kinds[-2] == "message_delta"
    assert final.content[0].text and final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


def test_stop_sequences_and_max_tokens(client):
    message = client.messages.create(model=MODEL, max_tokens=3, messages=QUESTION)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3
    stopped = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION,
                                     stop_sequences=["Paris"], extra_body=GREEDY)
    assert "Paris" not in stopped.content[0].text and stopped.content[0].text.strip()
    # the builtin engine does not say which stop string ended the text (vLLM does)
    assert stopped.stop_reason in ("stop_sequence", "end_turn")


def test_count_tokens_counts_the_rendered_prompt(client):
    short = client.messages.count_tokens(model=MODEL, messages=QUESTION)
    longer = client.messages.count_tokens(model=MODEL, messages=[
        {"role": "user", "content": "What is the capital of France, and of Spain?"}])
    assert 0 < short.input_tokens < longer.input_tokens
    made = client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION)
    assert short.input_tokens == made.usage.input_tokens   # the engine's own count


WEATHER = {"name": "get_weather", "description": "Current weather of a city",
           "input_schema": {"type": "object", "additionalProperties": False,
                            "properties": {"city": {"type": "string"}}, "required": ["city"]}}
NAMED = {"type": "tool", "name": "get_weather"}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_use_round_trip(client):
    asked = client.messages.create(model=MODEL, max_tokens=40, messages=ASK, tools=[WEATHER],
                                   tool_choice=NAMED, extra_body=GREEDY)
    uses = [b for b in asked.content if b.type == "tool_use"]
    assert asked.stop_reason == "tool_use" and len(uses) == 1
    assert uses[0].name == "get_weather" and isinstance(uses[0].input["city"], str)
    answered = client.messages.create(
        model=MODEL, max_tokens=24, tools=[WEATHER], tool_choice={"type": "none"},
        extra_body=GREEDY, messages=[*ASK, {"role": "assistant", "content": asked.content},
                                     {"role": "user", "content": [{
                                         "type": "tool_result", "tool_use_id": uses[0].id,
                                         "content": "21 degrees and sunny"}]}])
    assert answered.content[0].type == "text" and answered.content[0].text
    assert answered.stop_reason in ("end_turn", "max_tokens")
    # the call and its result reached the engine as turns after the question
    alone = client.messages.count_tokens(model=MODEL, messages=ASK).input_tokens
    assert answered.usage.input_tokens > alone + 10


def test_tool_use_streams_as_input_json_deltas(client):
    with client.messages.stream(model=MODEL, max_tokens=40, messages=ASK, tools=[WEATHER],
                                tool_choice=NAMED, extra_body=GREEDY) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds.count("content_block_start") == 1 and kinds[-1] == "message_stop"
    use = final.content[-1]
    assert use.type == "tool_use" and isinstance(use.input["city"], str)
    assert final.stop_reason == "tool_use"


class City(BaseModel):
    name: str
    country: str


def test_messages_parse_with_a_pydantic_model(client):
    parsed = client.messages.parse(model=MODEL, max_tokens=48, output_format=City,
                                   extra_body=GREEDY, messages=[
                                       {"role": "user",
                                        "content": "Give the capital of France as JSON."}])
    assert isinstance(parsed.parsed_output, City) and parsed.parsed_output.name


def test_bearer_auth_works_too(stack):
    client = anthropic.Anthropic(base_url=stack.base, auth_token=stack.key, max_retries=0)
    assert client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION).content


def test_bad_key_is_an_anthropic_authentication_error(stack):
    client = anthropic.Anthropic(base_url=stack.base, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION)
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "authentication_error"
    r = httpx.post(stack.base + "/v1/messages/count_tokens", timeout=10,
                   json={"model": MODEL, "messages": QUESTION})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("body, status", [
    (b"{", 400),
    (b'{"model": "m"}', 400),
    (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}]}',
     400),                                                                 # no max_tokens
    (b'{"model": "smollm2-135m-instruct", "max_tokens": 1, "messages": '
     b'[{"role": "user", "content": [{"type": "document"}]}]}', 422),    # schema-valid
    (b'{"model": "no-such-model", "max_tokens": 1, "messages": '
     b'[{"role": "user", "content": "x"}]}', 404),
])
def test_bad_bodies_answer_in_anthropic_shape(stack, body, status):
    r = httpx.post(stack.base + "/v1/messages", content=body, timeout=30,
                   headers={"x-api-key": stack.key, "anthropic-version": "2023-06-01",
                            "content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["message"]
    assert error["error"]["type"] == ("not_found_error" if status == 404
                                      else "invalid_request_error")


def test_usage_spend_and_metrics_are_recorded_like_chat(stack, client):
    before = stack.books(MODEL)
    client.messages.create(model=MODEL, max_tokens=4, messages=QUESTION)
    with client.messages.stream(model=MODEL, max_tokens=4, messages=QUESTION) as s:
        s.get_final_message()
    after = assert_nothing_lost(stack, MODEL, before, [200, 200])
    assert after.spend > before.spend


def test_rate_limited_key_gets_an_anthropic_rate_limit_error(stack):
    client = anthropic.Anthropic(base_url=stack.base, api_key=new_key(stack, rpm_limit=1), max_retries=0)
    client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION)
    with pytest.raises(anthropic.RateLimitError) as err:
        client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION)
    assert err.value.body["error"]["type"] == "rate_limit_error"


def test_over_budget_and_disallowed_model_keys_get_anthropic_errors(stack):
    poor = anthropic.Anthropic(base_url=stack.base, api_key=new_key(stack, max_budget=1e-9),
                               max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as err:
        poor.messages.create(model=MODEL, max_tokens=8, messages=QUESTION)
    assert err.value.body["error"]["type"] == "rate_limit_error"
    other = anthropic.Anthropic(base_url=stack.base, max_retries=0,
                                api_key=new_key(stack, models=[FLAKY]))
    with pytest.raises(anthropic.NotFoundError) as err:
        other.messages.create(model=MODEL, max_tokens=8, messages=QUESTION)
    assert err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        other.messages.count_tokens(model=MODEL, messages=QUESTION)


def test_engine_failure_mid_stream_ends_with_an_error_event(up, client):
    _, control = up
    with engine_faults(control, break_after=2):
        with httpx.stream("POST", up[0].base + "/v1/messages", timeout=30,
                          headers={"x-api-key": up[0].key}, json={
                              "model": FLAKY, "max_tokens": 8, "stream": True,
                              "messages": QUESTION}) as r:
            body = r.read().decode()
    names = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-1] == "error"
    assert "message_stop" not in names
    assert '"type":"api_error"' in body


def test_engine_tool_calls_stream_as_tool_use_blocks(up, client):
    _, control = up
    with engine_faults(control, tool_arguments='{"city": "Rome"}'):
        with client.messages.stream(model=FLAKY, max_tokens=8, messages=ASK,
                                    tools=[WEATHER]) as stream:
            final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Rome"}

"""Messages request -> chat body, chat answer -> Anthropic Message (read by the SDK's types)."""
import orjson
import pytest
from anthropic.types import Message

from common.errors import OpenAIError
from gateway.apis.anthropic.translate import (MessagesRequest, error_body, from_chat,
                                              parse_messages_request, to_chat)


def _req(**fields) -> MessagesRequest:
    base = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    return parse_messages_request(orjson.dumps({**base, **fields}))[1]


def test_system_blocks_stops_sampling_and_user():
    body = to_chat(_req(system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "kind"}],
                        stop_sequences=["END"], temperature=0.5, top_k=5,
                        metadata={"user_id": "u1"}))
    assert body["messages"][0] == {"role": "system", "content": "Be kind"}
    assert body["stop"] == ["END"] and body["max_tokens"] == 16 and body["top_k"] == 5
    assert body["user"] == "u1"


def test_output_format_becomes_a_json_schema_response_format():
    body = to_chat(_req(output_config={"format": {"type": "json_schema",
                                                  "schema": {"type": "object"}}}))
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": {"type": "object"}, "strict": True}}
    with pytest.raises(OpenAIError):
        to_chat(_req(output_config={"format": {"type": "yaml"}}))


def test_tool_use_and_tool_result_round_trip_into_chat():
    body = to_chat(_req(messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "thanks"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AA=="}}]}],
        tools=[{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}))
    msgs = body["messages"]
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "w",
                                                    "arguments": '{"city":"Paris"}'}
    assert msgs[1]["content"] == "Checking."
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}
    assert msgs[3]["content"][1]["image_url"]["url"] == "data:image/png;base64,AA=="
    assert body["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False


@pytest.mark.parametrize("raw", [
    b"{", b"[1]", b'{"model": "m", "messages": []}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',            # max_tokens
    b'{"model": "m", "max_tokens": 1, "messages": [{"role": "bot", "content": "x"}]}'])
def test_bad_bodies_are_anthropic_400s(raw):
    with pytest.raises(OpenAIError) as err:
        parse_messages_request(raw)
    assert err.value.status == 400


def test_unsupported_blocks_and_tools_are_422s():
    for fields in ({"messages": [{"role": "user", "content": [{"type": "image",
                                                              "source": "x"}]}]},
                   {"messages": [{"role": "user", "content": [{"type": "document"}]}]},
                   {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                   {"tool_choice": {"type": "sometimes"}}):
        with pytest.raises(OpenAIError) as err:
            to_chat(_req(**fields))
        assert err.value.status == 422


def test_error_shape():
    assert error_body(401, "bad key") == {"type": "error", "error": {
        "type": "authentication_error", "message": "bad key"}}
    assert error_body(429, "x")["error"]["type"] == "rate_limit_error"
    assert error_body(503, "x")["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("finish, matched, reason, sequence", [
    ("stop", None, "end_turn", None), ("length", None, "max_tokens", None),
    ("tool_calls", None, "tool_use", None), ("stop", "END", "stop_sequence", "END")])
def test_chat_answer_becomes_a_message(finish, matched, reason, sequence):
    chat = {"choices": [{"finish_reason": finish, "stop_reason": matched, "message": {
        "content": "Hi", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "w", "arguments": '{"city": "Paris"}'}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    message = Message.model_validate(from_chat(chat, "m", ["END"], "msg_1"))
    assert message.stop_reason == reason and message.stop_sequence == sequence
    assert message.content[0].text == "Hi"
    assert message.content[1].input == {"city": "Paris"} and message.content[1].id == "call_1"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 2)

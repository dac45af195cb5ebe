"""Responses request -> chat body, chat answer -> Response object (parsed by the SDK's types)."""
import pytest
from openai.types.responses import Response

from common.errors import OpenAIError
from gateway.apis.responses.translate import (ResponseInfo, from_chat, output_messages,
                                              parse_responses_request, to_chat)


def _req(**fields):
    import orjson
    return parse_responses_request(orjson.dumps({"model": "m", **fields}))[1]


def test_text_input_instructions_and_sampling():
    turn = to_chat(_req(input="Hi", instructions="Be brief.", max_output_tokens=7,
                        temperature=0, top_p=0.5, text={"format": {"type": "json_object"}}))
    assert turn.body["messages"] == [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "Hi"}]
    assert turn.conversation == [{"role": "user", "content": "Hi"}]   # instructions not kept
    assert turn.body["max_tokens"] == 7 and turn.body["temperature"] == 0
    assert turn.body["top_p"] == 0.5
    assert turn.body["response_format"] == {"type": "json_object"}


def test_items_function_calls_and_outputs_and_history():
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
    turn = to_chat(_req(input=[
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look "},
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]), history)
    msgs = turn.body["messages"]
    assert msgs[:2] == history
    assert msgs[2] == {"role": "system", "content": "rules"}
    assert msgs[3]["content"][1] == {"type": "image_url",
                                     "image_url": {"url": "data:image/png;base64,AA=="}}
    assert [c["id"] for c in msgs[4]["tool_calls"]] == ["c1", "c2"]   # one assistant turn
    assert msgs[5] == {"role": "tool", "tool_call_id": "c1", "content": "42"}


def test_tools_tool_choice_and_json_schema():
    turn = to_chat(_req(input="x", tools=[{"type": "function", "name": "f", "strict": True,
                                           "parameters": {"type": "object"}}],
                        tool_choice={"type": "function", "name": "f"},
                        text={"format": {"type": "json_schema", "name": "S", "strict": True,
                                         "schema": {"type": "object"}}}))
    assert turn.body["tools"] == [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}, "strict": True}}]
    assert turn.body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert turn.body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "S", "schema": {"type": "object"}, "strict": True}}


@pytest.mark.parametrize("fields, param", [
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools.0"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
    ({"input": "x", "text": {"format": "json"}}, "text.format"),
])
def test_unsupported_inputs_are_422s_naming_the_field(fields, param):
    # schema-valid (items are free-form objects in the published schema), refused: a 422
    with pytest.raises(OpenAIError) as err:
        to_chat(_req(**fields))
    assert err.value.status == 422 and err.value.param == param


def test_bad_bodies_are_400s():
    for raw in (b"{", b"[]", b'{"model": "m"}', b'{"model": "m", "input": 3}',
                b'{"model": "m", "input": "x", "max_output_tokens": 0}'):
        with pytest.raises(OpenAIError) as err:
            parse_responses_request(raw)
        assert err.value.status == 400


def test_chat_answer_becomes_a_response_the_sdk_reads():
    chat = {"choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Calling.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
    req = _req(input="x", previous_response_id="resp_0", store=True)
    body = from_chat(chat, ResponseInfo.of(req, "resp_1", 5))
    response = Response.model_validate(body)
    assert response.id == "resp_1" and response.previous_response_id == "resp_0"
    assert response.output_text == "Calling."
    assert response.output[1].call_id == "call_1" and response.usage.total_tokens == 7
    assert output_messages(body) == [{"role": "assistant", "content": "Calling.",
                                      "tool_calls": [{"id": "call_1", "type": "function",
                                                      "function": {"name": "f",
                                                                   "arguments": "{\"x\": 1}"}}]}]

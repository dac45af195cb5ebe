"""Chat chunks -> Responses events, checked by the official SDK's own stream accumulator."""
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from gateway.apis.responses.stream import ResponsesStream
from gateway.apis.responses.translate import ResponseInfo, ResponsesRequest


def _chunk(content=None, tool_calls=None, finish=None, usage=None):
    delta = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": usage}


def _run(chunks, **req):
    info = ResponseInfo.of(ResponsesRequest(model="m", input="hi", **req), "resp_1", 1)
    stream = ResponsesStream(info)
    events = stream.open()
    for c in chunks:
        events += stream.feed(c)
    events += stream.close()
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))
    return events, state._completed_response


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_text_stream_event_sequence_and_final_response():
    events, final = _run([_chunk("Hel"), _chunk("lo", finish="stop"),
                          {"choices": [], "usage": USAGE}])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[2]["item"]["content"] == []          # a snapshot, not the final item
    assert final.output_text == "Hello"
    assert final.usage.input_tokens == 5 and final.usage.output_tokens == 2
    assert final.status == "completed"


def test_tool_call_stream_becomes_function_call_items():
    calls = [_chunk(tool_calls=[{"index": 0, "id": "call_a", "type": "function",
                                 "function": {"name": "f", "arguments": ""}}]),
             _chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"x":'}}]),
             _chunk(tool_calls=[{"index": 0, "function": {"arguments": " 1}"}}]),
             _chunk(tool_calls=[{"index": 1, "id": "call_b", "type": "function",
                                 "function": {"name": "g", "arguments": "{}"}}]),
             _chunk(finish="tool_calls")]
    events, final = _run([_chunk("Let me check."), *calls])
    kinds = [e["type"] for e in events]
    assert kinds.count("response.function_call_arguments.done") == 2
    assert kinds.index("response.output_item.done") < kinds.index(
        "response.function_call_arguments.delta")   # the text item closed before the call
    calls_out = [o for o in final.output if o.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls_out] == [
        ("call_a", "f", '{"x": 1}'), ("call_b", "g", "{}")]
    assert final.output_text == "Let me check."


def test_length_finish_is_incomplete():
    events, _ = _run([_chunk("a", finish="length")], max_output_tokens=1)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["max_output_tokens"] == 1


def test_failure_mid_stream_ends_with_response_failed():
    info = ResponseInfo.of(ResponsesRequest(model="m", input="hi"), "resp_2", 1)
    stream = ResponsesStream(info)
    stream.open()
    stream.feed(_chunk("partial"))
    events = stream.fail("backend died", "upstream_error")
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert events[1]["response"]["error"]["message"] == "backend died"

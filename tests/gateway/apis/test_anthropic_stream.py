"""Chat chunks -> Anthropic stream events, accumulated by the official SDK's own code."""
from anthropic.lib.streaming._messages import accumulate_event

from gateway.apis.anthropic.stream import MessagesStream


def _chunk(content=None, tool_calls=None, finish=None, usage=None):
    delta = {k: v for k, v in (("content", content), ("tool_calls", tool_calls)) if v}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": usage}


def _run(chunks):
    stream = MessagesStream("m", None, "msg_1", input_estimate=9)
    events = stream.open()
    for c in chunks:
        events += stream.feed(c)
    events += stream.close()
    snapshot, bufs = None, {}
    for event in events:
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return events, snapshot


def test_text_stream_sequence_and_usage():
    events, message = _run([_chunk("Hel"), _chunk("lo", finish="stop"),
                            {"choices": [], "usage": {"prompt_tokens": 4,
                                                      "completion_tokens": 2}}])
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[0]["message"]["usage"]["input_tokens"] == 9     # the gateway's estimate
    assert message.content[0].text == "Hello" and message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 2 and message.usage.input_tokens == 4


def test_tool_call_stream_becomes_tool_use_blocks():
    events, message = _run([
        _chunk("Let me see."),
        _chunk(tool_calls=[{"index": 0, "id": "call_a", "function": {"name": "w",
                                                                    "arguments": '{"ci'}}]),
        _chunk(tool_calls=[{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]),
        _chunk(finish="tool_calls")])
    assert message.stop_reason == "tool_use"
    assert message.content[1].type == "tool_use" and message.content[1].name == "w"
    assert message.content[1].input == {"city": "Oslo"} and message.content[1].id == "call_a"
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert starts[1]["content_block"] == {"type": "tool_use", "id": "call_a", "name": "w",
                                          "input": {}}


def test_failure_is_an_error_event():
    assert MessagesStream("m").fail("engine died", "upstream_error") == [
        {"type": "error", "error": {"type": "api_error", "message": "engine died"}}]
    assert MessagesStream("m").fail("slow", "timeout")[0]["error"]["type"] == "timeout_error"

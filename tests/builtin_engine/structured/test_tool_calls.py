"""The tool-call text format: prompt rendering and the streaming parser (no model needed)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builtin_engine.structured.tool_calls import (ARGS_PREFIX, CALL_BEGIN, CALL_END,
                                                   ToolCallStream, merge_deltas, render_messages)

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def _block(name: str, args: dict) -> str:
    return f"{CALL_BEGIN}{name}{ARGS_PREFIX}{json.dumps(args)}{CALL_END}"


def _parse(text: str, step: int):
    parser, content, deltas = ToolCallStream(), "", []
    for i in range(0, len(text), step):
        c, d = parser.push(text[i:i + step])
        content += c
        deltas += d
    return content + parser.finish(), deltas


@settings(max_examples=40, deadline=None)
@given(prefix=st.text(st.characters(blacklist_characters="<"), max_size=20),
       args=st.lists(st.dictionaries(st.sampled_from(["city", "n", "x"]),
                                     st.one_of(st.integers(), st.text(max_size=8))),
                     min_size=1, max_size=3),
       step=st.integers(1, 40))
def test_any_chunking_gives_the_same_calls(prefix, args, step):
    text = prefix + "\n".join(_block("f", a) for a in args)
    content, deltas = _parse(text, step)
    assert content == prefix
    calls = merge_deltas(deltas)
    assert [json.loads(c["function"]["arguments"]) for c in calls] == args
    assert [d["index"] for d in deltas if "id" in d] == list(range(len(args)))
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)


def test_text_without_calls_is_content_and_a_partial_trigger_is_released():
    content, deltas = _parse("a < b and <tool", 3)
    assert content == "a < b and <tool" and deltas == []


def test_a_block_cut_short_streams_its_name_but_no_complete_arguments():
    content, deltas = _parse(CALL_BEGIN + "get_weather" + ARGS_PREFIX + '{"city": "Pa', 5)
    assert content == ""
    assert deltas[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("system", [None, "Be brief."])
def test_tools_join_the_system_prompt(system):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "weather?"}]
    out = render_messages(messages, [TOOL])
    assert out[0]["role"] == "system" and '"name": "get_weather"' in out[0]["content"]
    assert (system or "") in out[0]["content"] and len(out) == 2


def test_calls_and_results_render_as_text():
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    out = render_messages([{"role": "user", "content": "weather?"},
                           {"role": "assistant", "content": "", "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}], None)
    assert out[1] == {"role": "assistant", "content": _block("get_weather", {"city": "Paris"})}
    assert out[2] == {"role": "user", "content": "<tool_response>\nSunny\n</tool_response>"}

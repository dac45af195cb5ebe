"""Tool calls as text: the format the model writes, the prompt that teaches it, the parsers.

The format (Hermes / Qwen style, which chat models trained on tools already know):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

one block per call, blocks separated by a newline. The grammar (grammar.py) emits exactly
`CALL_BEGIN + name + ARGS_PREFIX`, then the arguments object, then `CALL_END`, so the parsers
below rely on those constant strings.

    messages = render_messages(messages, tools)        # tools into the system prompt
    parser = ToolCallStream()
    content, deltas = parser.push(text_delta) ...; tail = parser.finish()
    tool_calls = merge_deltas(all_deltas)              # the non-streaming shape
"""
from __future__ import annotations

import json
import uuid

TRIGGER = "<tool_call>"
CALL_BEGIN = '<tool_call>\n{"name": "'
ARGS_PREFIX = '", "arguments": '
CALL_END = "}\n</tool_call>"
END_TAG = "</tool_call>"

TOOLS_PROMPT = (
    "You can call functions. Their definitions (JSON Schema of the arguments) are:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one block per call, exactly like this:\n"
    '<tool_call>\n{{"name": "<function name>", "arguments": {{<arguments as JSON>}}}}\n'
    "</tool_call>")


def tools_prompt(tools: list[dict]) -> str:
    """The system-prompt text that lists `tools` (OpenAI tool dicts) and the call format."""
    lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return TOOLS_PROMPT.format(tools=lines)


def _call_text(call: dict) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments") or "{}"
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return f"{CALL_BEGIN}{fn.get('name', '')}{ARGS_PREFIX}{args}{CALL_END}"


def render_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """Messages any plain chat template can format: the tools join the system prompt,
    assistant tool calls become their text blocks, tool results become user turns wrapped in
    <tool_response> (templates without tools often refuse or drop a "tool" role)."""
    out = [dict(m) for m in messages]
    if tools:
        head = tools_prompt(tools)
        if out and out[0]["role"] in ("system", "developer"):
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{head}".lstrip()}
        else:
            out.insert(0, {"role": "system", "content": head})
    rendered = []
    for m in out:
        calls = m.pop("tool_calls", None)
        if m["role"] == "assistant" and calls:
            text = "\n".join(_call_text(c) for c in calls)
            m["content"] = f"{m['content']}\n{text}" if m.get("content") else text
        elif m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n"
                                            "</tool_response>"}
        m.pop("tool_call_id", None)
        rendered.append(m)
    return rendered


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def merge_deltas(deltas: list[dict]) -> list[dict]:
    """Whole OpenAI tool_calls from ToolCallStream's deltas (the non-streaming shape)."""
    calls: list[dict] = []
    for d in deltas:
        if "id" in d:
            calls.append({"id": d["id"], "type": "function",
                          "function": {"name": d["function"]["name"], "arguments": ""}})
        calls[d["index"]]["function"]["arguments"] += d["function"].get("arguments", "")
    return calls


class ToolCallStream:
    """Generated text -> content and tool calls, incrementally: push text deltas, get back
    (content delta, tool_call deltas) with OpenAI's shape: the first delta of a call carries
    index, id, type and name; later ones only index and an arguments fragment."""

    def __init__(self) -> None:
        self.buffer = ""
        self.index = -1  # of the call being streamed; -1: none yet
        self.in_call = False
        self.args_sent = 0  # characters of the current call's arguments already emitted
        self.named = False  # the current call's first delta (with its name) is out

    @property
    def called(self) -> bool:
        return self.index >= 0

    def push(self, text: str) -> tuple[str, list[dict]]:
        self.buffer += text
        content, deltas = "", []
        while True:
            if not self.in_call:
                start = self.buffer.find(TRIGGER)
                if start < 0:
                    keep = _partial_suffix(self.buffer, TRIGGER)
                    cut = len(self.buffer) - keep
                    content += self.buffer[:cut] if not self.called else ""
                    self.buffer = self.buffer[cut:]
                    return content, deltas
                if not self.called:
                    content += self.buffer[:start]
                self.buffer = self.buffer[start:]
                self.in_call = True
            step = self._call_step()
            if step is None:
                return content, deltas
            deltas.extend(step)

    def _call_step(self) -> list[dict] | None:
        """Advance inside a call block; None when it needs more text."""
        name_end = self.buffer.find(ARGS_PREFIX, len(CALL_BEGIN))
        if name_end < 0:
            return None
        deltas = []
        if not self.named:
            self.index += 1
            self.named = True
            deltas.append({"index": self.index, "id": _call_id(), "type": "function",
                           "function": {"name": self.buffer[len(CALL_BEGIN):name_end],
                                        "arguments": ""}})
        args_start = name_end + len(ARGS_PREFIX)
        end = self.buffer.find(END_TAG, args_start)
        if end >= 0:  # the block is complete: the arguments stop before CALL_END
            args_end = end + len(END_TAG) - len(CALL_END)
            fragment = self.buffer[args_start + self.args_sent:args_end]
            self.buffer = self.buffer[end + len(END_TAG):]
            self.in_call, self.args_sent, self.named = False, 0, False
        else:  # hold back what could be the start of CALL_END
            safe = len(self.buffer) - len(CALL_END)
            fragment = self.buffer[args_start + self.args_sent:max(safe, args_start)]
            if not fragment:
                return deltas or None
            self.args_sent += len(fragment)
        if fragment:
            deltas.append({"index": self.index, "function": {"arguments": fragment}})
        return deltas

    def finish(self) -> str:
        """What is left at the end: text that was held back (no call follows it)."""
        left, self.buffer = self.buffer, ""
        return "" if self.called else left


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0

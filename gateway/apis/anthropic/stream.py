"""Chat completion chunks -> Anthropic Messages stream events.

    stream = MessagesStream(model, stop_sequences, input_estimate=prompt_tokens)
    events = stream.open()               # message_start, ping
    for chunk in chat_chunks:            # parsed `data:` payloads
        events += stream.feed(chunk)     # content_block_start / _delta / _stop
    events += stream.close()             # content_block_stop, message_delta, message_stop
    # or, when the engine fails mid-way: events += stream.fail(message, code)

Text goes to a `text` block (`text_delta`); each chat tool call becomes a `tool_use` block
whose arguments arrive as `input_json_delta` fragments. `message_start` carries the gateway's
prompt-token estimate; `message_delta` the engine's final counts (cumulative, as Anthropic's).
"""
from __future__ import annotations

from common.error_codes import UpstreamErrorKind
from gateway.apis.anthropic.translate import error_body, stop_reason, usage
from gateway.apis.chunk_reader import ChatChunkReader
from gateway.apis.events import new_id


class MessagesStream(ChatChunkReader):
    def __init__(self, model: str, stops=None, message_id: str | None = None,
                 input_estimate: int = 0):
        super().__init__()
        self.model, self.stops = model, stops
        self.id = message_id or new_id("msg")
        self.input_estimate = input_estimate
        self.blocks: list[dict] = []          # the content as it stands (for usage records)
        self._open: int | None = None         # index of the block deltas go to
        self._calls: dict[int, int] = {}      # chat tool-call index -> block index

    def open(self) -> list[dict]:
        message = {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {**usage(None, self.input_estimate), "output_tokens": 0}}
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def _start(self, block: dict) -> list[dict]:
        events = self._stop_open()
        self._open = len(self.blocks)
        self.blocks.append(block)
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}} \
            if block["type"] == "tool_use" else {"type": "text", "text": ""}
        return events + [{"type": "content_block_start", "index": self._open,
                          "content_block": start}]

    def on_text(self, text: str) -> list[dict]:
        events: list[dict] = []
        if self._open is None or self.blocks[self._open]["type"] != "text":
            events = self._start({"type": "text", "text": ""})
        self.blocks[self._open]["text"] += text
        return events + [{"type": "content_block_delta", "index": self._open,
                          "delta": {"type": "text_delta", "text": text}}]

    def on_tool_call(self, call: dict) -> list[dict]:
        fn = call.get("function") or {}
        events: list[dict] = []
        index = self._calls.get(call.get("index", 0))
        if index is None:
            events = self._start({"type": "tool_use", "id": call.get("id") or new_id("toolu"),
                                  "name": fn.get("name") or "", "arguments": ""})
            index = self._calls[call.get("index", 0)] = self._open
        if fn.get("arguments"):
            self.blocks[index]["arguments"] += fn["arguments"]
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta",
                                     "partial_json": fn["arguments"]}})
        return events

    def _stop_open(self) -> list[dict]:
        index, self._open = self._open, None
        return [] if index is None else [{"type": "content_block_stop", "index": index}]

    def close(self) -> list[dict]:
        events = self._stop_open()
        reason, sequence = stop_reason(self.finish_reason, self.matched_stop,
                                       self.stops)
        final = usage(self.chat_usage, self.input_estimate)
        return events + [
            {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
             "usage": {"input_tokens": final["input_tokens"],
                       "output_tokens": final["output_tokens"]}},
            {"type": "message_stop"}]

    def fail(self, message: str, code: str | None = None) -> list[dict]:
        """The event ending a stream the engine broke (`code`: the gateway's error kind)."""
        status = 504 if code in (UpstreamErrorKind.TIMEOUT, UpstreamErrorKind.FIRST_TOKEN_TIMEOUT) else 500
        return [error_body(status, message)]

    def text(self) -> str:
        return "".join(b["text"] for b in self.blocks if b["type"] == "text")

"""What the stream translators share: reading OpenAI chat chunks into text / tool-call deltas.

    class MyStream(ChatChunkReader):
        def on_text(self, text) -> list[dict]: ...        # events for a content delta
        def on_tool_call(self, call) -> list[dict]: ...   # events for one tool_calls[] delta
    events = MyStream().feed(chunk)   # after the stream: .finish_reason, .chat_usage
"""
from __future__ import annotations


class ChatChunkReader:
    def __init__(self):
        self.chat_usage: dict | None = None     # the engine's usage (OpenAI names)
        self.finish_reason: str | None = None
        self.matched_stop: object = None        # vLLM's `stop_reason`: the stop string hit

    def feed(self, chunk: dict) -> list[dict]:
        """The client events for one parsed chat chunk (usage-only chunks give none)."""
        events: list[dict] = []
        if chunk.get("usage"):
            self.chat_usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events += self.on_text(delta["content"])
            for call in delta.get("tool_calls") or ():
                events += self.on_tool_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.matched_stop = choice.get("stop_reason")
        return events

    def on_text(self, text: str) -> list[dict]:
        raise NotImplementedError

    def on_tool_call(self, call: dict) -> list[dict]:
        raise NotImplementedError

"""An engine stream with the output guardrail applied: each content chunk's text goes through
a StreamRedactor, so what the relay forwards is masked, and a blocked answer ends with
`finish_reason: "content_filter"` (OpenAI's way to say so inside a stream).

    stream = GuardedStream(engine_stream, guard)    # what the relay reads instead

Every event stays one valid SSE `data:` JSON event; text held back at the end is sent in the
chunk carrying `finish_reason` (or, when none comes, in one more chunk before the usage chunk
or `data: [DONE]`, which stays last). Usage chunks and error events pass unchanged.
"""
from __future__ import annotations

from typing import AsyncIterator

import orjson

from common.guardrail_spec import Direction
from engine_adapter.base import EngineStream
from gateway.guardrails.stream_redactor import StreamRedactor
from gateway.request_path.relay import is_done, payload

CONTENT_FILTER = "content_filter"




def _event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class GuardedStream(EngineStream):
    __slots__ = ("inner", "guard", "redactors", "template", "stopped")

    def __init__(self, inner: EngineStream, guard):
        self.inner = inner
        self.guard = guard           # gateway.guardrails.request_guard.RequestGuard
        self.redactors: dict[int, StreamRedactor] = {}
        self.template: dict | None = None   # the last content chunk: the shape of a flush
        self.stopped = False                # blocked: later content is dropped

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._events()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def ready_events(self) -> list[bytes]:
        """The inner stream's events already received, transformed (the relay sends them in
        one write)."""
        ready = getattr(self.inner, "ready_events", None)
        out: list[bytes] = []
        for event in ready() if ready is not None else ():
            out += self._transform(event)
        return out

    async def _events(self) -> AsyncIterator[bytes]:
        async for event in self.inner:
            for out in self._transform(event):
                yield out

    def _transform(self, event: bytes) -> list[bytes]:
        """What to forward for one engine event: it, a rewritten copy, nothing, or at the
        end the text still held and then `data: [DONE]`."""
        if is_done(event):
            tail = self._flush_all()
            return [event] if tail is None else [tail, event]
        data = payload(event)
        if data is None:            # comments, anything not JSON
            return [event]
        choices = data.get("choices")
        if "error" in data or not choices:
            # a usage chunk comes after the text: what is still held goes before it
            tail = self._flush_all() if data.get("usage") else None
            return [event] if tail is None else [tail, event]
        out = self._chunk(data, choices)
        return [] if out is None else [out]

    def _chunk(self, data: dict, choices: list) -> bytes | None:
        """One content chunk with its text replaced by what may be sent now (None: nothing
        to send, the chunk is dropped)."""
        if self.stopped:
            return None
        if len(choices) == 1:   # most chunks: one chat choice, a delta of text alone
            choice = choices[0]
            delta = choice.get("delta") if type(choice) is dict else None
            if type(delta) is dict and len(delta) == 1 and type(delta.get("content")) is str \
                    and choice.get("finish_reason") is None:
                return self._text_delta(data, choice, delta)
        keep = carried = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            delta = choice.get("delta")
            if type(delta) is dict:   # chat: delta.content; other delta fields go as they are
                holder, key, text = delta, "content", delta.get("content")
                extra = len(delta) > ("content" in delta)
            else:                     # completions: text
                holder, key, text, extra = choice, "text", choice.get("text"), False
            has_text = type(text) is str
            carried = carried or has_text
            redactor = self.redactors.get(choice.get("index", 0)) or self._redactor(
                choice.get("index", 0))
            released = redactor.feed(text) if has_text and text else ""
            finish = choice.get("finish_reason")
            if finish is not None:
                released += redactor.flush()
            if redactor.hits:
                self.guard.count_hits(redactor, Direction.OUTPUT)
            if redactor.blocked is not None:
                self.stopped = True
                released, finish = "", CONTENT_FILTER
                choice["finish_reason"] = finish
            if has_text or released:    # held text may end in a chunk that had none
                holder[key] = released
            keep = keep or bool(released) or finish is not None or extra
        if carried:
            self.template = data
        return _event(data) if keep or data.get("usage") else None

    def _text_delta(self, data: dict, choice: dict, delta: dict) -> bytes | None:
        redactor = self.redactors.get(choice.get("index", 0)) or self._redactor(
            choice.get("index", 0))
        released = redactor.feed(delta["content"])
        self.template = data
        if redactor.hits:
            self.guard.count_hits(redactor, Direction.OUTPUT)
            if redactor.blocked is not None:
                self.stopped = True
                delta["content"], choice["finish_reason"] = "", CONTENT_FILTER
                return _event(data)
        if not released:
            return None   # held back: the chunk carried nothing else
        delta["content"] = released
        return _event(data)

    def _redactor(self, index) -> StreamRedactor:
        redactor = self.redactors.get(index)
        if redactor is None:
            redactor = self.redactors[index] = StreamRedactor(self.guard.policy)
        return redactor

    def _flush_all(self) -> bytes | None:
        """The text still held when the stream ends without a finish_reason chunk (a choice
        whose held text breaks a block rule ends with content_filter instead)."""
        if self.stopped or self.template is None:
            return None
        chat = "delta" in ((self.template.get("choices") or [{}])[0])
        choices = []
        for index, redactor in self.redactors.items():
            text = redactor.flush()
            self.guard.count_hits(redactor, Direction.OUTPUT)
            finish = None
            if redactor.blocked is not None:
                text, finish = "", CONTENT_FILTER
            if text or finish:
                choice = {"index": index, "finish_reason": finish}
                choice.update({"delta": {"content": text}} if chat else {"text": text})
                choices.append(choice)
        if not choices:
            return None
        data = dict(self.template, choices=choices)
        if "usage" in data:
            data["usage"] = None
        return _event(data)


__all__ = ["CONTENT_FILTER", "GuardedStream"]

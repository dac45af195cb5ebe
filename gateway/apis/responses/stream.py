"""Chat completion chunks -> the Responses API's typed stream events.

    stream = ResponsesStream(info)
    events = stream.open()                      # response.created, response.in_progress
    for chunk in chat_chunks:                   # parsed `data:` payloads
        events += stream.feed(chunk)            # output_item.added, output_text.delta, ...
    events += stream.close()                    # ...done events, response.completed
    # or, when the engine fails mid-way: events += stream.fail(message, code)

Every event carries a `sequence_number` counting from 0. Text arrives in one message item
(`response.output_item.added` -> `response.content_part.added` -> `response.output_text.delta`*
-> `response.output_text.done` -> `response.content_part.done` -> `response.output_item.done`);
each chat tool call becomes a function_call item (`response.function_call_arguments.delta`* ->
`.done`). `response.completed` (or `response.incomplete` after max_output_tokens) carries the
whole Response, as a non-streamed request would have returned it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from gateway.apis.chunk_reader import ChatChunkReader
from gateway.apis.events import new_id
from gateway.apis.responses.translate import (ResponseInfo, finish, function_item, message_item,
                                              skeleton, text_part)


@dataclass
class _Item:
    index: int            # output_index
    item: dict            # the output item as it stands
    chat_index: int = -1  # a tool call's index in the chat stream


class ResponsesStream(ChatChunkReader):
    def __init__(self, info: ResponseInfo):
        super().__init__()
        self.info = info
        self.response = skeleton(info, "in_progress")
        self._seq = 0
        self._text: _Item | None = None
        self._calls: dict[int, _Item] = {}
        self._open: _Item | None = None        # the item deltas currently go to

    def _event(self, type_: str, **fields) -> dict:
        # Items and the response keep changing after their event: each event gets a snapshot.
        event = {"type": type_, "sequence_number": self._seq,
                 **{k: copy.deepcopy(v) if isinstance(v, dict) else v
                    for k, v in fields.items()}}
        self._seq += 1
        return event

    def open(self) -> list[dict]:
        return [self._event("response.created", response=self.response),
                self._event("response.in_progress", response=self.response)]

    def _start(self, item: dict, chat_index: int = -1) -> tuple[_Item, list[dict]]:
        events = self._end_open()
        opened = _Item(len(self.response["output"]), item, chat_index)
        self.response["output"].append(item)
        self._open = opened
        events.append(self._event("response.output_item.added", output_index=opened.index,
                                  item=item))
        return opened, events

    def on_text(self, text: str) -> list[dict]:
        events: list[dict] = []
        if self._text is None or self._open is not self._text:
            self._text, events = self._start(message_item(new_id("msg"), "", "in_progress"))
            self._text.item["content"].append(text_part(""))
            events.append(self._event("response.content_part.added", **self._where(self._text),
                                      part=text_part("")))
        self._text.item["content"][0]["text"] += text
        events.append(self._event("response.output_text.delta", **self._where(self._text),
                                  delta=text, logprobs=[]))
        return events

    def on_tool_call(self, call: dict) -> list[dict]:
        index = call.get("index", 0)
        fn = call.get("function") or {}
        events: list[dict] = []
        item = self._calls.get(index)
        if item is None:
            item, events = self._start(function_item(new_id("fc"), call.get("id") or
                                                     new_id("call"), fn.get("name") or "", "",
                                                     "in_progress"), index)
            self._calls[index] = item
        elif fn.get("name") and not item.item["name"]:
            item.item["name"] = fn["name"]
        if fn.get("arguments"):
            item.item["arguments"] += fn["arguments"]
            events.append(self._event("response.function_call_arguments.delta",
                                      item_id=item.item["id"], output_index=item.index,
                                      delta=fn["arguments"]))
        return events

    @staticmethod
    def _where(item: _Item) -> dict:
        return {"item_id": item.item["id"], "output_index": item.index, "content_index": 0}

    def _end_open(self) -> list[dict]:
        item, self._open = self._open, None
        if item is None:
            return []
        body = item.item
        body["status"] = "completed"
        if body["type"] == "message":
            part = body["content"][0]
            events = [self._event("response.output_text.done", **self._where(item),
                                  text=part["text"], logprobs=[]),
                      self._event("response.content_part.done", **self._where(item),
                                  part=part)]
        else:
            body["arguments"] = body["arguments"] or "{}"
            events = [self._event("response.function_call_arguments.done", item_id=body["id"],
                                  output_index=item.index, name=body["name"],
                                  arguments=body["arguments"])]
        events.append(self._event("response.output_item.done", output_index=item.index,
                                  item=body))
        return events

    def close(self) -> list[dict]:
        """The closing events once the chat stream ended normally."""
        events = self._end_open()
        finish(self.response, self.finish_reason, self.chat_usage)
        kind = "response.incomplete" if self.response["status"] == "incomplete" \
            else "response.completed"
        return events + [self._event(kind, response=self.response)]

    def fail(self, message: str, code: str | None = None) -> list[dict]:
        """The closing events when the engine failed mid-stream."""
        self.response["status"] = "failed"
        self.response["error"] = {"code": code or "server_error", "message": message}
        return [self._event("error", code=code or "server_error", message=message, param=None),
                self._event("response.failed", response=self.response)]

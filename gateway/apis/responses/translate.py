"""OpenAI Responses API <-> chat completions, for engines that only speak chat.

    req = parse_responses_request(raw)                      # ResponsesRequest or 400
    turn = to_chat(req, history=stored.conversation)        # ChatTurn: chat body + this input
    response = from_chat(chat_json, ResponseInfo.of(req, "resp_…", created_at))

`input` (a string, or message / function_call / function_call_output items), `instructions`
(a system message; per the API, not carried to the next turn), function `tools` and
`tool_choice`, `text.format` (json_object, json_schema -> `response_format`),
`max_output_tokens`, `temperature`, `top_p`, `parallel_tool_calls`. Built-in tools (web
search, file search, ...) and `item_reference` inputs are refused with a 400.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.apis.events import new_id
from gateway.apis.schemas import Count, parse_body


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    input: Union[StrictStr, list[dict]]
    instructions: StrictStr | None = None
    tools: list[dict] | None = None
    tool_choice: Union[Literal["auto", "none", "required"], dict, None] = None
    text: dict | None = None
    max_output_tokens: Count | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool = False
    store: bool = True
    previous_response_id: StrictStr | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    user: StrictStr | None = None


def parse_responses_request(raw: bytes) -> tuple[dict, ResponsesRequest]:
    """(the JSON object, the validated request) or a 400 in the OpenAI shape."""
    return parse_body(raw, ResponsesRequest)


def _bad(message: str, param: str) -> OpenAIError:
    # The published schema takes any item object: a refusal of one that matches it is a 422
    # (the gateway's rule: 400 only for a body that does not match the schema).
    return OpenAIError(422, message, param=param, code=ErrorCode.UNSUPPORTED_VALUE)


# ---------------------------------------------------------------- request -> chat

_PART_TEXT = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def _content(content, param: str):
    """Responses content (a string or parts) -> chat content (a string or chat parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("content must be a string or a list of content parts", param)
    parts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _PART_TEXT:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _bad(f"content part type {kind!r} is not supported", f"{param}.{i}")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # a plain string: every engine reads it
    return parts


def _output_text(output) -> str:
    """A function_call_output's `output`: a string, or parts of which the text is kept."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(p.get("text") or "") for p in output if isinstance(p, dict))
    return orjson.dumps(output).decode()


def _append_tool_call(messages: list[dict], item: dict, param: str) -> None:
    if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
        raise _bad("a function_call item needs 'call_id' and 'name'", param)
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": str(item.get("arguments") or "{}")}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)   # parallel calls: one assistant turn
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def input_messages(input_, param: str = "input") -> list[dict]:
    """The chat messages a request's `input` stands for."""
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    messages: list[dict] = []
    for i, item in enumerate(input_):
        kind = item.get("type", "message")
        where = f"{param}.{i}"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _bad(f"unknown message role {role!r}", f"{where}.role")
            # 'developer' is the Responses name for system instructions; chat engines and
            # their templates know 'system'.
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            _append_tool_call(messages, item, where)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                             "content": _output_text(item.get("output"))})
        elif kind == "reasoning":
            continue          # no reasoning state to carry to a chat engine
        else:
            raise _bad(f"input item type {kind!r} is not supported", f"{where}.type")
    if not messages:
        raise _bad("input must contain at least one message", param)
    return messages


def _tools(tools: list[dict]) -> list[dict]:
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise _bad(f"tool type {tool.get('type')!r} is not supported: only 'function' "
                       "tools with a name", f"tools.{i}")
        fn = {"name": tool["name"]}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice):
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad(f"tool_choice {orjson.dumps(choice).decode()} is not supported", "tool_choice")


def _response_format(text: dict | None) -> dict | None:
    fmt = (text or {}).get("format")
    if fmt is not None and not isinstance(fmt, dict):
        raise _bad("text.format must be an object", "text.format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("text.format.schema must be a JSON schema object", "text.format.schema")
        schema = {"name": fmt.get("name") or "response", "schema": fmt["schema"]}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    raise _bad(f"text.format type {fmt.get('type')!r} is not supported", "text.format.type")


@dataclass
class ChatTurn:
    body: dict                  # the chat completions request for the engine
    conversation: list[dict]    # history + this input, without the instructions


def to_chat(req: ResponsesRequest, history: list[dict] = ()) -> ChatTurn:
    """The chat request for one Responses turn after `history` (a stored conversation)."""
    conversation = [*history, *input_messages(req.input)]
    messages = ([{"role": "system", "content": req.instructions}] if req.instructions else [])
    body: dict = {"model": req.model, "messages": messages + conversation, "stream": req.stream}
    if req.tools:
        body["tools"] = _tools(req.tools)
    if req.tool_choice is not None:
        body["tool_choice"] = _tool_choice(req.tool_choice)
    response_format = _response_format(req.text)
    if response_format:
        body["response_format"] = response_format
    optional = {"max_tokens": req.max_output_tokens, "temperature": req.temperature,
                "top_p": req.top_p, "parallel_tool_calls": req.parallel_tool_calls,
                "user": req.user}
    body.update({k: v for k, v in optional.items() if v is not None})
    return ChatTurn(body, conversation)


# ---------------------------------------------------------------- chat -> Response

@dataclass
class ResponseInfo:
    """The request fields a Response object echoes, and its identity."""
    id: str
    created_at: int
    model: str
    request: dict = field(default_factory=dict)

    @classmethod
    def of(cls, req: ResponsesRequest, response_id: str | None = None,
           created_at: int | None = None) -> "ResponseInfo":
        echo = req.model_dump(exclude={"input", "stream", "model"}, exclude_unset=True)
        return cls(response_id or new_id("resp"), created_at or int(time.time()), req.model,
                   echo)


def skeleton(info: ResponseInfo, status: str) -> dict:
    """A Response object without output (what `response.created` carries)."""
    r = info.request
    return {
        "id": info.id, "object": "response", "created_at": info.created_at, "status": status,
        "background": False, "error": None, "incomplete_details": None,
        "instructions": r.get("instructions"), "max_output_tokens": r.get("max_output_tokens"),
        "model": info.model, "output": [], "parallel_tool_calls": r.get("parallel_tool_calls",
                                                                        True),
        "previous_response_id": r.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "store": r.get("store", True),
        "temperature": r.get("temperature"), "text": r.get("text") or {"format": {"type": "text"}},
        "tool_choice": r.get("tool_choice", "auto"), "tools": r.get("tools") or [],
        "top_p": r.get("top_p"), "truncation": "disabled", "usage": None,
        "user": r.get("user"), "metadata": r.get("metadata") or {},
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [text_part(text)] if status == "completed" else []}


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_item(item_id: str, call_id: str, name: str, arguments: str,
                  status: str = "completed") -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def usage(chat_usage: dict | None) -> dict | None:
    if not chat_usage:
        return None
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, completion = chat_usage.get("prompt_tokens") or 0, \
        chat_usage.get("completion_tokens") or 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat_usage.get("total_tokens") or prompt + completion}


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def finish(response: dict, finish_reason: str | None, chat_usage: dict | None) -> dict:
    """Status, incomplete_details and usage of a finished response (in place)."""
    reason = _INCOMPLETE.get(finish_reason or "")
    response["status"] = "incomplete" if reason else "completed"
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["usage"] = usage(chat_usage)
    return response


def from_chat(chat: dict, info: ResponseInfo) -> dict:
    """The Response object for a non-streamed chat completion."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output = []
    if message.get("content"):
        output.append(message_item(new_id("msg"), message["content"]))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        output.append(function_item(new_id("fc"), call.get("id") or new_id("call"),
                                    fn.get("name") or "", fn.get("arguments") or "{}"))
    response = skeleton(info, "completed")
    response["output"] = output
    return finish(response, choice.get("finish_reason"), chat.get("usage"))


def output_messages(response: dict) -> list[dict]:
    """A Response's output as chat messages, to continue the conversation next turn."""
    messages: list[dict] = []
    for item in response.get("output") or ():
        if item["type"] == "message":
            text = "".join(p.get("text") or "" for p in item.get("content") or ())
            messages.append({"role": "assistant", "content": text})
        elif item["type"] == "function_call":
            _append_tool_call(messages, item, "output")
    return messages


def output_text(response: dict) -> str:
    """All output text of a Response (for usage records and comparisons)."""
    return "".join(p.get("text") or "" for item in response.get("output") or ()
                   if item["type"] == "message" for p in item.get("content") or ())

"""Anthropic Messages API <-> chat completions, for engines that only speak chat.

    data, req = parse_messages_request(raw)         # MessagesRequest or OpenAIError 400
    body = to_chat(req)                             # the chat completions request
    message = from_chat(chat_json, req.model, req.stop_sequences)   # the Anthropic Message

`system` (a string or text blocks) -> a system message; content blocks `text`, `image`
(base64 or url source) -> chat parts; assistant `tool_use` -> `tool_calls`; user
`tool_result` -> `tool` messages (before the rest of that user turn, as chat expects);
`stop_sequences` -> `stop`; `output_config.format` (json_schema) -> `response_format`; `tools` (`input_schema` -> `parameters`) and `tool_choice`
(auto/any/tool/none, `disable_parallel_tool_use`); `metadata.user_id` -> `user`.
Refusals are OpenAIErrors (400); `error_body` renders any error in Anthropic's shape:
{"type": "error", "error": {"type", "message"}}.
"""
from __future__ import annotations

from typing import Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.apis.events import new_id
from gateway.apis.schemas import MAX_TOKENS, Count, Int, parse_body

# Anthropic's error types by HTTP status (docs.anthropic.com "Errors")
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                402: "billing_error", 403: "permission_error", 404: "not_found_error",
                413: "request_too_large", 422: "invalid_request_error",
                429: "rate_limit_error", 500: "api_error", 502: "api_error",
                503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    """A refusal of a body that matches the published schema: 422, as everywhere in the
    gateway (rendered as Anthropic's invalid_request_error by the endpoint)."""
    return OpenAIError(422, message, param=param, code=ErrorCode.UNSUPPORTED_VALUE)


class MessageParam(BaseModel):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[dict]]


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    max_tokens: Count
    system: Union[StrictStr, list[dict], None] = None
    stop_sequences: list[StrictStr] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: Int(0, MAX_TOKENS) | None = None
    tools: list[dict] | None = None
    tool_choice: dict | None = None
    metadata: dict | None = None
    output_config: dict | None = None
    stream: bool = False


class CountTokensRequest(MessagesRequest):
    max_tokens: Count | None = None   # count_tokens takes none


def parse_messages_request(raw: bytes, schema: type[MessagesRequest] = MessagesRequest):
    """(the JSON object, the validated request) or an OpenAIError 400."""
    return parse_body(raw, schema)


# ---------------------------------------------------------------- request -> chat

def _block_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content
                       if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _image(block: dict, where: str) -> dict:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = str(source.get("url"))
    else:
        raise bad_request(f"{where}.source: image source type "
                                  f"{source.get('type')!r} is not supported")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_call(block: dict) -> dict:
    return {"id": str(block.get("id") or new_id("toolu")), "type": "function",
            "function": {"name": str(block.get("name") or ""),
                         "arguments": orjson.dumps(block.get("input") or {}).decode()}}


def _tool_result(block: dict) -> dict:
    text = _block_text(block.get("content"))
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""), "content": text}


def _turn(message: MessageParam, where: str) -> list[dict]:
    """One Anthropic turn as chat messages (tool results first, then the rest)."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    tools, parts, calls = [], [], []
    for i, block in enumerate(message.content):
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text") or "")})
        elif kind == "image":
            parts.append(_image(block, f"{where}.content.{i}"))
        elif kind == "tool_use" and message.role == "assistant":
            calls.append(_tool_call(block))
        elif kind == "tool_result" and message.role == "user":
            tools.append(_tool_result(block))
        elif kind in ("thinking", "redacted_thinking"):
            continue     # nothing a chat engine could continue from
        else:
            raise bad_request(f"{where}.content.{i}.type: content block {kind!r} is "
                                      f"not supported in a {message.role} message")
    out = list(tools)
    if parts or calls:
        content = ("".join(p["text"] for p in parts)
                   if all(p["type"] == "text" for p in parts) else parts)
        turn: dict = {"role": message.role, "content": content if parts else None}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def _tools(tools: list[dict]) -> list[dict]:
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom") or not isinstance(tool.get("name"), str):
            raise bad_request(f"tools.{i}: only client tools (name, input_schema) are "
                                      f"supported, not {tool.get('type')!r}")
        fn = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if tool.get("description"):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: dict, body: dict) -> None:
    kind = choice.get("type")
    if kind == "auto":
        body["tool_choice"] = "auto"
    elif kind == "any":
        body["tool_choice"] = "required"
    elif kind == "none":
        body["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise bad_request(f"tool_choice.type: {kind!r} is not supported")
    if choice.get("disable_parallel_tool_use"):
        body["parallel_tool_calls"] = False


def chat_messages(req: MessagesRequest) -> list[dict]:
    messages = []
    system = _block_text(req.system) if req.system is not None else ""
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(req.messages):
        messages += _turn(message, f"messages.{i}")
    return messages


def to_chat(req: MessagesRequest) -> dict:
    """The chat completions request for a Messages request."""
    body: dict = {"model": req.model, "messages": chat_messages(req), "stream": req.stream}
    if req.max_tokens is not None:
        body["max_tokens"] = req.max_tokens
    if req.stop_sequences:
        body["stop"] = req.stop_sequences
    for key in ("temperature", "top_p", "top_k"):
        if getattr(req, key) is not None:
            body[key] = getattr(req, key)
    if req.tools:
        body["tools"] = _tools(req.tools)
    if req.tool_choice:
        _tool_choice(req.tool_choice, body)
    user = (req.metadata or {}).get("user_id")
    if isinstance(user, str):
        body["user"] = user
    response_format = _output_format((req.output_config or {}).get("format"))
    if response_format:
        body["response_format"] = response_format
    return body


def _output_format(fmt) -> dict | None:
    """Structured outputs (`output_config.format`) as chat's `response_format`."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" \
            or not isinstance(fmt.get("schema"), dict):
        raise bad_request("output_config.format: expected {\"type\": \"json_schema\", "
                          "\"schema\": {...}}")
    return {"type": "json_schema",
            "json_schema": {"name": "output", "schema": fmt["schema"], "strict": True}}


# ---------------------------------------------------------------- chat -> Message

def stop_reason(finish_reason: str | None, matched: object, stops) -> tuple[str, str | None]:
    """(Anthropic stop_reason, stop_sequence). `matched` is the engine's report of the stop
    string that ended the text (vLLM's `stop_reason`), when it gives one."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "content_filter":
        return "refusal", None
    if isinstance(matched, str) and stops and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def usage(chat_usage: dict | None, input_estimate: int = 0) -> dict:
    chat_usage = chat_usage or {}
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": chat_usage.get("prompt_tokens", input_estimate),
            "output_tokens": chat_usage.get("completion_tokens") or 0,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def tool_input(arguments: str | None) -> dict:
    """A tool call's arguments as the `input` object (a non-object is wrapped, not lost)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def from_chat(chat: dict, model: str, stops=None, message_id: str | None = None) -> dict:
    """The Message for a non-streamed chat completion (`stops`: the request's
    stop_sequences)."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or new_id("toolu"),
                        "name": fn.get("name") or "", "input": tool_input(fn.get("arguments"))})
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stops)
    return {"id": message_id or new_id("msg"), "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": reason,
            "stop_sequence": sequence, "usage": usage(chat.get("usage"))}


def message_text(message: dict) -> str:
    return "".join(b.get("text") or "" for b in message.get("content") or ()
                   if b.get("type") == "text")

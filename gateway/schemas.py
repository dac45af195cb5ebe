"""The OpenAI request bodies the gateway accepts (the contract published in /openapi.json).

Validation is strict (no "0.5" for a float); unknown fields are allowed and forwarded to the
engine untouched (logprobs, tools, response_format, repetition_penalty, ...).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from gateway.errors import OpenAIError


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[StrictStr, list[dict], None] = None
    name: str | None = None


Stop = Union[StrictStr, Annotated[list[StrictStr], Field(max_length=16)], None]


class _Sampling(_Body):
    model: str = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    stop: Stop = None
    seed: int | None = None
    user: str | None = None
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    # engine extensions (vLLM / builtin) forwarded as-is
    top_k: int | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


PromptT = Union[StrictStr, list[StrictStr], list[StrictInt], list[list[StrictInt]]]


class CompletionRequest(_Sampling):
    prompt: PromptT
    echo: bool | None = None


def parse_body(raw: bytes, schema: type[_Body]) -> tuple[dict, _Body]:
    """(the raw dict to forward, the validated model) or a 400 OpenAIError."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(400, f"request body is not valid JSON: {exc}", code="invalid_json")
    if not isinstance(data, dict):
        raise OpenAIError(400, "request body must be a JSON object", code="invalid_json")
    try:
        return data, schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise OpenAIError(400, f"{param}: {first['msg']}" if param else first["msg"],
                          param=param, code="invalid_request") from None


def requested_max_tokens(req: _Sampling) -> int | None:
    return getattr(req, "max_completion_tokens", None) or req.max_tokens


def openapi_body(schema: type[_Body]) -> dict:
    """openapi_extra documenting a body that the route parses itself (for speed and errors)."""
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": schema.model_json_schema()}}}}

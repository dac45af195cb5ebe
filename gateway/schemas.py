"""The OpenAI request bodies the gateway accepts (the contract published in /openapi.json).

Validation is strict (no "0.5" for a float); unknown fields are allowed and forwarded to the
engine untouched (logprobs, tools, response_format, repetition_penalty, ...).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from gateway.errors import OpenAIError

# Token counts the gateway accepts (and forwards); engines hold them in 32-bit integers.
MAX_TOKENS = 2**31 - 1
INT64 = 2**63 - 1


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
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    stop: Stop = None
    seed: int | None = Field(None, ge=-INT64 - 1, le=INT64)
    user: str | None = Field(None, max_length=1000)
    n: int = Field(1, ge=1, le=1, description="one choice per request: the gateway refuses "
                   "n > 1 (send n requests)")
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    # engine extensions (vLLM / builtin) forwarded as-is
    top_k: int | None = Field(None, ge=-1, le=MAX_TOKENS)
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)


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
    try:  # forwarded as JSON: orjson reads more than it writes (nesting past 255 levels)
        orjson.dumps(data)
    except TypeError as exc:
        raise OpenAIError(400, f"request body cannot be forwarded: {exc}",
                          code="invalid_json") from None
    try:
        return data, schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise OpenAIError(400, f"{param}: {first['msg']}" if param else first["msg"],
                          param=param, code="invalid_request") from None


def requested_max_tokens(req: _Sampling) -> int | None:
    return getattr(req, "max_completion_tokens", None) or req.max_tokens


def openapi_body(schema: type[BaseModel], required: bool = True) -> dict:
    """openapi_extra documenting a body that the route parses itself (for speed and errors).

    The JSON schema is inlined: pydantic's `#/$defs/...` references do not resolve inside an
    OpenAPI document, where definitions live under #/components/schemas."""
    return {"requestBody": {"required": required, "content": {
        "application/json": {"schema": inline_refs(schema.model_json_schema())}}}}


def inline_refs(schema: dict) -> dict:
    """The schema with every local `$ref` replaced by its definition (models here are not
    recursive) and `$defs` dropped."""
    defs = schema.get("$defs", {})

    def expand(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**expand(defs[ref.removeprefix("#/$defs/")]), **expand(rest)}
            return {k: expand(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [expand(v) for v in node]
        return node

    return expand(schema)

"""The OpenAI request bodies the gateway accepts (the contract published in /openapi.json).

Validation is strict (no "0.5" for a float, no "3" for an integer) but follows JSON Schema,
where 3.0 is an integer: integral numbers are accepted for integer fields and forwarded as
integers. Unknown fields are allowed and forwarded to the engine untouched (logprobs, tools,
response_format, repetition_penalty, ...).
"""
from __future__ import annotations

import re
from typing import Annotated, Literal, Union

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, ValidationError

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.request_path.modalities import PART_MODALITY

# Token counts the gateway accepts (and forwards); engines hold them in 32-bit integers.
MAX_TOKENS = 2**31 - 1
# Seeds within I-JSON's interoperable integers (RFC 7493): JSON tools compare numbers as
# doubles, so past 2**53 a bound like 2**63 - 1 admits values above it (2**63 + 191 rounds to
# 2**63 - 1's double).
SEED_MAX = 2**53 - 1


def _integral(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


def Int(lo: int, hi: int):  # noqa: N802  (a type)
    """An integer in [lo, hi]; the bounds come first so the JSON schema shows them."""
    return Annotated[int, Field(ge=lo, le=hi), BeforeValidator(_integral)]


Count = Int(1, MAX_TOKENS)


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Body):
    type: Literal["text"]
    text: StrictStr


class MediaPart(_Body):
    """Image, audio, file or video input: accepted for models that declare the modality."""
    type: Literal[tuple(t for t in PART_MODALITY if t != "text")]  # type: ignore[valid-type]


ContentPart = Annotated[Union[TextPart, MediaPart], Field(discriminator="type")]


class StreamOptions(_Body):
    include_usage: bool = False


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[StrictStr, list[ContentPart], None] = None
    name: str | None = None


Stop = Union[StrictStr, Annotated[list[StrictStr], Field(max_length=16)], None]


class _Sampling(_Body):
    model: str = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: Count | None = None
    stop: Stop = None
    seed: Int(-SEED_MAX, SEED_MAX) | None = None
    user: str | None = Field(None, max_length=1000)
    n: Int(1, 1) = Field(1, description="one choice per request: the gateway refuses "
                   "n > 1 (send n requests)")
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    # engine extensions (vLLM / builtin) forwarded as-is
    top_k: Int(-1, MAX_TOKENS) | None = None
    ignore_eos: bool | None = None
    min_tokens: Int(0, MAX_TOKENS) | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Count | None = None


TokenId = Int(0, MAX_TOKENS)
PromptT = Union[StrictStr, list[StrictStr], list[TokenId], list[list[TokenId]]]


class CompletionRequest(_Sampling):
    prompt: PromptT
    echo: bool | None = None


def parse_body(raw: bytes, schema: type[_Body]) -> tuple[dict, _Body]:
    """(the raw dict to forward, the validated model) or a 400 OpenAIError."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(400, f"request body is not valid JSON: {exc}", code=ErrorCode.INVALID_JSON)
    if not isinstance(data, dict):
        raise OpenAIError(400, "request body must be a JSON object", code=ErrorCode.INVALID_JSON)
    try:  # forwarded as JSON: orjson reads more than it writes (nesting past 255 levels)
        orjson.dumps(data)
    except TypeError as exc:
        raise OpenAIError(400, f"request body cannot be forwarded: {exc}",
                          code=ErrorCode.INVALID_JSON) from None
    try:
        req = schema.model_validate(data)
    except ValidationError as exc:
        first = _most_specific(exc.errors())
        param = _param(first["loc"])
        raise OpenAIError(400, f"{param}: {first['msg']}" if param else first["msg"],
                          param=param, code=ErrorCode.INVALID_REQUEST) from None
    return _with_integers(data, req), req


# pydantic names the alternatives of a union in the error location (".str", ".list[...]")
_BRANCH = re.compile(r"^(str|int|float|bool|none|list\[.*|dict\[.*|tagged-union\[.*|function-.*)$")


def _param(loc: tuple) -> str | None:
    parts = [p for p in loc if not _BRANCH.match(str(p))]
    # a content part's tag follows its index: messages.0.content.1.text.text → ...1.text
    parts = [p for i, p in enumerate(parts)
             if not (p in PART_MODALITY and i and isinstance(parts[i - 1], int))]
    return ".".join(str(p) for p in parts) or None


def _most_specific(errors: list[dict]) -> dict:
    """For a field that failed every alternative of a union, the error that got furthest
    (messages.0.content.1.text, not messages.0.content.str)."""
    field = errors[0]["loc"][:1]
    same = [e for e in errors if e["loc"][:1] == field]
    return max(same, key=lambda e: len(e["loc"]))


INT_FIELDS = ("max_tokens", "max_completion_tokens", "seed", "n", "top_k", "min_tokens")


def _with_integers(data: dict, req: _Body) -> dict:
    """The forwarded body with 3.0 written as 3 where the gateway read an integer (engines
    that validate strictly would refuse the float)."""
    for name in INT_FIELDS:
        if isinstance(data.get(name), float):
            data[name] = getattr(req, name)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and any(isinstance(t, float) or isinstance(t, list)
                                        and any(isinstance(u, float) for u in t) for t in prompt):
        data["prompt"] = req.prompt
    return data


def requested_max_tokens(req: _Sampling) -> int | None:
    return getattr(req, "max_completion_tokens", None) or req.max_tokens

"""POST /v1/embeddings: the OpenAI embeddings API, forwarded to engines as it is.

    EMBEDDING    # the engine protocol (adapter.embeddings(body); never streamed)
    EMBEDDINGS   # the client endpoint

Limits, budgets and admission reserve the input tokens only: an embedding generates nothing,
so the completion side of every reservation is 0 (ParsedRequest.max_tokens = 0).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr, field_validator

from gateway.endpoints.base import Endpoint, EngineProtocol, ParsedRequest
from gateway.schemas import Int, PromptT, _Body

# OpenAI's bound on the inputs of one request (each an array item).
MAX_INPUTS = 2048


class EmbeddingRequest(_Body):
    model: StrictStr
    input: PromptT   # a text, texts, a token-id list or token-id lists
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Int(1, 2**31 - 1) | None = None
    user: StrictStr | None = None

    @field_validator("input")
    @classmethod
    def _inputs(cls, value):
        """Non-empty inputs, at most MAX_INPUTS of them (one token-id list is ONE input)."""
        single = isinstance(value, str) or (bool(value) and isinstance(value[0], int))
        inputs = [value] if single else value
        if not inputs or any(len(i) == 0 for i in inputs):
            raise ValueError("input must not be empty, nor hold empty strings or token lists")
        if len(inputs) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} inputs per request, got {len(inputs)}")
        return value


class EmbeddingProtocol(EngineProtocol):
    name = "embeddings"
    method = "embeddings"
    streams = False

    def prompt_tokens(self, estimator, body: dict) -> int:
        value = body.get("input")
        if isinstance(value, list) and value and isinstance(value[0], int):
            return len(value)
        if isinstance(value, list) and value and isinstance(value[0], list):
            return sum(len(ids) for ids in value)
        return estimator.count_prompt(value or "")

    def prompt_text(self, body: dict) -> str:
        return ""   # no prefix to reuse: an encoder keeps no KV cache between requests

    def result_text(self, result: dict) -> str:
        return ""   # vectors, not text: usage comes from the engine


EMBEDDING = EmbeddingProtocol()


class Embeddings(Endpoint):
    name = "embeddings"
    path = "/v1/embeddings"
    schema = EmbeddingRequest
    protocol = EMBEDDING

    def to_engine(self, body: dict, req: EmbeddingRequest) -> ParsedRequest:
        return ParsedRequest(model=req.model, body=body, stream=False, include_usage=False,
                             max_tokens=0, max_tokens_param="input", user=req.user)


EMBEDDINGS = Embeddings()

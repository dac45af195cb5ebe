"""POST /v1/embeddings: the OpenAI embeddings API, forwarded to engines as it is.

    EMBEDDING    # the engine protocol (adapter.embeddings(body); never streamed)
    EMBEDDINGS   # the client endpoint

Limits, budgets and admission reserve the input tokens only: an embedding generates nothing,
so the completion side of every reservation is 0 (ParsedRequest.max_tokens = 0).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StrictStr

from gateway.apis.endpoint import Endpoint, EngineProtocol, ParsedRequest
from gateway.apis.schemas import Int, TokenId, _Body

# OpenAI's bound on the inputs of one request (one token-id list is ONE input).
MAX_INPUTS = 2048

Text = Annotated[StrictStr, Field(min_length=1)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
# In the JSON schema itself (not a validator), so clients and fuzzers see the bounds.
EmbeddingInput = Union[Text, Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)],
                       TokenIds,
                       Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_INPUTS)]]


class EmbeddingRequest(_Body):
    model: StrictStr
    input: EmbeddingInput   # a text, texts, a token-id list or token-id lists; none empty
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Int(1, 2**31 - 1) | None = None
    user: StrictStr | None = None


class EmbeddingProtocol(EngineProtocol):
    name = "embeddings"
    method = "embeddings"
    streams = False

    def prompt_tokens(self, estimator, body: dict) -> int:
        value = body.get("input")
        if isinstance(value, str) or not isinstance(value, list):
            return estimator.count_prompt(value if isinstance(value, str) else "")
        if all(isinstance(v, str) for v in value):
            return estimator.count_prompt(value)
        if value and isinstance(value[0], list):
            return sum(len(ids) for ids in value)
        return len(value)   # one token-id list

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
        body["input"] = req.input   # validated: integral numbers (3.0) are token ids (3)
        return ParsedRequest(model=req.model, body=body, stream=False, include_usage=False,
                             max_tokens=0, max_tokens_param="input", user=req.user)


EMBEDDINGS = Embeddings()

"""The OpenAI embeddings request and response, as the builtin engine reads and writes them.

    body = EmbeddingRequest.model_validate(raw)       # 400 via the app's validation handler
    inputs = body.inputs()                            # list[str] | list[list[int]]
    return embeddings_body(vectors, body.encoding_format, served, prompt_tokens)
"""
from __future__ import annotations

import base64
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

# OpenAI's own bound on the inputs of one request.
MAX_INPUTS = 2048


Text = Annotated[str, Field(min_length=1)]
TokenIds = Annotated[list[int], Field(min_length=1)]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    # One text, a list of texts, one token-id list or a list of them (OpenAI's four shapes);
    # none empty, at most MAX_INPUTS inputs.
    input: (Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)] | TokenIds
            | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_INPUTS)])
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: of texts, or of token-id lists."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [list(value)]
        return list(value)


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":  # little-endian float32, what the OpenAI SDK decodes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def embeddings_body(vectors: np.ndarray, encoding_format: str, model: str,
                    prompt_tokens: int) -> dict:
    """The OpenAI `list` of `embedding` objects with usage."""
    data = [{"object": "embedding", "index": i, "embedding": _encode(v, encoding_format)}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}

"""One interface to every inference engine.

The gateway talks to vLLM, SGLang, TGI, llama.cpp, the builtin engine and hosted providers
through `EngineAdapter`. Streaming calls return an `EngineStream` of raw SSE events (the
bytes of one `data: ...` event each, separator included) so the relay can forward them
without re-serialising; non-streaming calls return the parsed JSON response.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import AsyncIterator

from common.error_codes import UpstreamErrorKind


@dataclass(frozen=True)
class LoadView:
    """Engine load normalised across engines (missing values are 0)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0          # fraction 0..1 of KV cache in use
    prefix_hit_rate: float = 0.0   # fraction 0..1 of prompt tokens served from cache
    adapters: frozenset[str] = field(default_factory=frozenset)


class EngineError(Exception):
    """An upstream failure, classified so the relay can decide to retry or relay it.

    kind: connect | timeout | first_token_timeout | http_4xx | http_5xx | protocol | aborted
    status/body: set when the engine answered with an HTTP error (body is relayed for 4xx).
    """

    def __init__(self, kind: str, message: str, status: int | None = None,
                 body: dict | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.body = body

    @property
    def retryable(self) -> bool:
        # A 4xx is the client's fault (e.g. prompt too long): another backend answers the same.
        return self.kind != "http_4xx"


class EngineStream(abc.ABC):
    """Raw SSE events from one upstream request; `aclose` aborts it in the engine."""

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[bytes]: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class EngineAdapter(abc.ABC):
    """A client for one backend (one engine server or one hosted deployment)."""

    @abc.abstractmethod
    async def chat(self, body: dict) -> dict | EngineStream:
        """POST chat/completions; an EngineStream when body["stream"] is true."""

    @abc.abstractmethod
    async def completions(self, body: dict) -> dict | EngineStream:
        """POST completions; an EngineStream when body["stream"] is true."""

    async def embeddings(self, body: dict) -> dict:
        """POST embeddings (OpenAI shape, never streamed)."""
        raise EngineError(UpstreamErrorKind.HTTP_4XX, f"{type(self).__name__} does not serve embeddings",
                          status=400, body={"error": {
                              "message": "this backend does not serve embeddings",
                              "type": "invalid_request_error", "param": None,
                              "code": "unsupported_endpoint"}})

    @abc.abstractmethod
    async def health(self) -> bool:
        """True when the engine answers its health check."""

    @abc.abstractmethod
    async def load(self) -> LoadView:
        """Current load, parsed from the engine's Prometheus metrics."""

    async def load_adapter(self, name: str, path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load LoRA adapters")

    async def unload_adapter(self, name: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot unload LoRA adapters")

    async def kv_summary(self) -> dict | None:
        """Resident prefix-block hashes (builtin engine only); None when unsupported."""
        return None

    async def tokenize(self, body: dict) -> list[int] | None:
        """Token ids the engine computes for a {"prompt"} or {"messages", "add_generation_prompt"}
        body (vLLM's POST /tokenize); None when unsupported or refused."""
        return None

    async def aclose(self) -> None:
        """Release pooled connections."""

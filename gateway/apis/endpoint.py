"""What one client API is to the gateway: its request shape, how it maps to the engine protocol
and back, its streaming events and its error shape.

Two layers, so an endpoint whose client format differs from the engine's is one small file:

- `EngineProtocol` is what the gateway sends an engine (OpenAI chat completions, completions,
  later embeddings): the adapter method, how the engine body's prompt is counted, read for
  routing and checked for modalities, the answer's text, and how a broken stream continues.
  Everything behind admission (routing, retries, resume, shadows, usage) works on it.
- `Endpoint` is what the client speaks: its pydantic schema, `to_engine` (client body → engine
  body), `from_engine` (engine answer → client body), `stream_events` (engine SSE chunks →
  client events; None forwards the engine's bytes untouched, the fast path), `error_body` and
  `stream_error` (errors in the client's shape).

    CHAT_COMPLETIONS = ChatCompletions()        # module singletons: no per-request objects
    parsed = endpoint.parse(raw)                # ParsedRequest, or a 400 in the endpoint's shape
    return await handle(request, principal, endpoint)   # gateway/request_path/pipeline.py
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson
from pydantic import BaseModel

from common.errors import InferplaneError
from gateway.apis.schemas import parse_body


@dataclass(slots=True)
class ParsedRequest:
    """One validated client request, in the engine protocol's terms (the stages' input)."""
    model: str                 # the client's `model` string, as asked
    body: dict                 # the ENGINE-protocol body (forwarded with few changes)
    stream: bool
    include_usage: bool        # the client asked for a usage chunk at the end of its stream
    max_tokens: int | None     # the completion budget the client asked for
    max_tokens_param: str      # its field's name (error messages)
    user: str | None           # sticky routing / split key when no session header is sent
    n: int = 1


class EngineProtocol:
    """An engine API the gateway calls (`method` names the EngineAdapter coroutine)."""
    name: str = ""
    method: str = ""           # "chat" | "completions" | ...: getattr(adapter, method)(body)
    streams: bool = True       # whether the engine may answer with an SSE stream

    async def call(self, adapter, body: dict):
        """The engine's answer: a dict, or an EngineStream when body["stream"]."""
        return await getattr(adapter, self.method)(body)

    def prompt_tokens(self, estimator, body: dict) -> int:
        """The prompt's token estimate (limits and admission reserve on it)."""
        raise NotImplementedError

    def prompt_text(self, body: dict) -> str:
        """The prompt as text, for the approximate prefix index of the router."""
        return ""

    def tokenize_body(self, body: dict, served_model: str) -> dict | list[int] | None:
        """The engine's /tokenize request for this prompt, the token ids themselves, or None."""
        return None

    def messages(self, body: dict) -> list | None:
        """Chat messages whose content parts the model's modalities must cover (None: none)."""
        return None

    def result_text(self, result: dict) -> str:
        """The text of a non-streamed answer (usage estimate, shadow comparison)."""
        return ""

    def delta_text(self, chunk: dict | None) -> str:
        """The text one streamed chunk adds."""
        return ""

    def upstream_body(self, body: dict, served_model: str, stream: bool) -> dict:
        """The body sent to one backend: its served model name, usage always asked for."""
        out = dict(body)
        out["model"] = served_model
        if out.get("max_completion_tokens") and not out.get("max_tokens"):
            out["max_tokens"] = out["max_completion_tokens"]  # engines predating the new name
        if stream:
            options = dict(out.get("stream_options") or {})
            options["include_usage"] = True   # always: usage is how tokens are accounted
            out["stream_options"] = options
        return out

    # -- resuming a broken stream on another backend (gateway/request_path/resume.py) ----------------
    def resumable(self, body: dict) -> bool:
        """Whether a stream of this body can be continued elsewhere at all."""
        return False

    def can_continue(self, backend) -> bool:
        return False

    def continuation(self, body: dict, sent_text: str) -> dict:
        """`body` changed to continue after `sent_text` (token budgets are cut by resume.py)."""
        raise NotImplementedError


class StreamEvents(Protocol):
    """One stream's translation from engine chunks to client events (made per stream by
    `Endpoint.stream_events`; holds that stream's state, e.g. an output index).

    Each method returns the bytes of zero or more complete SSE events (b"" for none)."""

    def opening(self) -> bytes:
        """Events sent before the first engine chunk (e.g. `response.created`)."""

    def chunk(self, data: dict) -> bytes:
        """Events for one parsed engine chunk (a usage-only chunk arrives here too)."""

    def closing(self, usage: dict | None) -> bytes:
        """Events that end a complete answer (in place of `data: [DONE]`)."""

    def error(self, message: str, code: str | None) -> bytes:
        """Events that end a stream broken mid-way (in place of error event + [DONE])."""


class Endpoint:
    """One client API. Subclass, set the class attributes, override the hooks that differ."""
    name: str = ""                     # label in logs and traces: "chat.completions"
    path: str = ""                     # "/v1/chat/completions"
    schema: type[BaseModel]            # the request body model (validated once per request)
    protocol: EngineProtocol           # what the engine is sent

    def parse(self, raw: bytes) -> ParsedRequest:
        """Validate the client's JSON (an OpenAIError 400 when invalid) into a ParsedRequest."""
        body, req = parse_body(raw, self.schema)
        return self.to_engine(body, req)

    def to_engine(self, body: dict, req: BaseModel) -> ParsedRequest:
        """The validated client request as engine-protocol terms (identity for OpenAI APIs)."""
        raise NotImplementedError

    def from_engine(self, result: dict, parsed: ParsedRequest) -> dict:
        """The engine's (non-streamed) answer, usage filled in, in the client's shape."""
        result["model"] = parsed.model
        return result

    def stream_events(self, parsed: ParsedRequest) -> StreamEvents | None:
        """None: the engine's SSE bytes are forwarded as they are (OpenAI APIs)."""
        return None

    def error_body(self, exc: InferplaneError) -> dict:
        """An error response's JSON in the client's shape."""
        return exc.body()

    def error_response(self, exc: InferplaneError):
        from fastapi.responses import Response
        return Response(orjson.dumps(self.error_body(exc)), status_code=exc.status,
                        headers=exc.headers, media_type="application/json")

"""An echo engine (answers with the prompt's text, streamed in 3-character chunks) and a
moderation endpoint, served together by one real HTTP server; helpers to put a guardrail
policy in a running test gateway's snapshot."""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from types import MappingProxyType

import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common.guardrail_spec import PolicySpec
from registry.guardrails import GuardrailsView, PolicyView
from registry.snapshot import BackendView
from tests.gateway.conftest import free_port, model

CHUNK = 3


def _reply(body: dict) -> str:
    if "messages" in body:
        content = body["messages"][-1]["content"]
        return content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content)
    return body.get("prompt", "")


def _event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class EchoServer:
    def __init__(self):
        self.bodies: list[dict] = []
        self.moderations: list[dict] = []
        self.port = free_port()
        self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def app(self) -> Starlette:
        async def generate(request: Request, chat: bool) -> Response:
            body = await request.json()
            self.bodies.append(body)
            text = _reply(body)
            if body.get("stream"):
                return StreamingResponse(self._stream(body, text, chat),
                                         media_type="text/event-stream")
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "stop"} if chat else
                      {"index": 0, "text": text, "finish_reason": "stop"})
            return JSONResponse({"id": "x", "object": "chat.completion" if chat else
                                 "text_completion", "created": 1, "model": body["model"],
                                 "choices": [choice], "usage": {
                                     "prompt_tokens": 3, "completion_tokens": 5,
                                     "total_tokens": 8}})

        async def moderations(request: Request) -> Response:
            body = await request.json()
            self.moderations.append(body)
            joined = " ".join(body["input"])
            if "SLOW" in joined:
                await asyncio.sleep(3)
            if "BROKEN" in joined:
                return JSONResponse({"error": "down"}, status_code=500)
            flagged = "FLAG" in joined
            return JSONResponse({"id": "m", "model": "mod", "results": [
                {"flagged": flagged, "categories": {"violence": flagged, "hate": False}}]})

        async def models(_request: Request) -> Response:   # the control plane's probe
            return JSONResponse({"object": "list", "data": [{"id": "echo", "object": "model"}]})

        async def health(_request: Request) -> Response:
            return Response("ok")

        async def chat(request: Request) -> Response:
            return await generate(request, True)

        async def completions(request: Request) -> Response:
            return await generate(request, False)

        return Starlette(routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/moderations", moderations, methods=["POST"]),
            Route("/v1/models", models), Route("/health", health)])

    async def _stream(self, body: dict, text: str, chat: bool):
        base = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": 1, "model": body["model"]}
        if chat:
            yield _event({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                   "content": ""},
                                               "finish_reason": None}]})
        for i in range(0, len(text), CHUNK):
            piece = text[i:i + CHUNK]
            choice = {"index": 0, "delta": {"content": piece}} if chat else \
                {"index": 0, "text": piece}
            yield _event({**base, "choices": [{**choice, "finish_reason": None}]})
        end = {"index": 0, "delta": {}} if chat else {"index": 0, "text": ""}
        yield _event({**base, "choices": [{**end, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _event({**base, "choices": [], "usage": {
                "prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})
        yield b"data: [DONE]\n\n"


@pytest.fixture(scope="package")
def echo():
    server = EchoServer()
    uv = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=server.port,
                                       log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield server
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _forget(request):
    if "echo" in request.fixturenames:
        server = request.getfixturevalue("echo")
        server.bodies.clear()
        server.moderations.clear()


def echo_model(server: EchoServer, name: str = "m"):
    return model(name, [BackendView(id="echo", url=server.url, engine="openai",
                                    served_model="echo", gpu=None, weight=1.0, tier="hot",
                                    state="ready", adapters=(), version=None)])


def use_policy(gateway, spec: dict, models=("m",), keys: dict | None = None,
               name: str = "p", revision: int = 1) -> None:
    """Put one policy, bound to `models` (and key ids), in the gateway's snapshot."""
    PolicySpec.model_validate(spec)
    view = GuardrailsView(MappingProxyType({name: PolicyView(name, revision, spec)}),
                          MappingProxyType({m: name for m in models}),
                          MappingProxyType(keys or {}))
    current = gateway.source.current
    gateway.source.current = replace(current, version=current.version + 1, guardrails=view)

"""The engine's HTTP face: OpenAI chat/completions (streaming SSE), models, health, metrics and a
KV summary for precise prefix-aware routing."""
from __future__ import annotations

import time
import uuid
from typing import AsyncIterator

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from builtin_engine.errors import EngineError
from builtin_engine.runner.logprobs import chat_logprobs, completion_logprobs
from builtin_engine.serving.adapters import AdapterRegistry
from builtin_engine.serving.adapters import router as adapter_router
from builtin_engine.serving.api_key import ApiKeyMiddleware
from builtin_engine.serving.app_setup import (NATIVE_TRACING_OFF, install_error_handlers,
                                              unsupported_router)
from builtin_engine.serving.protocol import (ChatCompletionRequest, CompletionRequest,
                                             TokenizeRequest)
from builtin_engine.serving.text_stream import (TextChunk, attach_grammar, chat_messages,
                                                generate_text, resolve_max_tokens, tool_call_chunks)
from builtin_engine.serving.tracing import EngineTraceMiddleware, traced_outputs
from builtin_engine.structured.tool_calls import merge_deltas
from common.error_codes import ErrorCode


def _sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _usage(chunk: TextChunk) -> dict:
    return {"prompt_tokens": chunk.prompt_tokens, "completion_tokens": chunk.completion_tokens,
            "total_tokens": chunk.prompt_tokens + chunk.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": chunk.cached_tokens}}


class EngineService:
    """Glue between HTTP requests and the AsyncEngine."""

    def __init__(self, engine, tokenizer, served_name: str, max_model_len: int, adapters):
        self.engine, self.tokenizer, self.adapters = engine, tokenizer, adapters
        self.served_name, self.max_model_len = served_name, max_model_len

    def check_generation(self, body) -> None:
        """Model and fields, checked before any prompt is rendered or tokenized."""
        self.check_model(body.model)
        unsupported = body.unsupported_field()
        if unsupported is not None:
            param, what = unsupported
            raise EngineError(400, f"{what} is not supported by the builtin engine (serve "
                              "the model with vLLM or SGLang for it)", param,
                              code=ErrorCode.UNSUPPORTED_PARAMETER)

    def check_model(self, model: str | None) -> None:
        if model and model != self.served_name and not self.adapters.is_loaded(model):
            raise EngineError(404, f"The model `{model}` does not exist.", param="model",
                              code=ErrorCode.MODEL_NOT_FOUND)

    def chat_prompt(self, body: ChatCompletionRequest) -> list[int]:
        messages = chat_messages(body)
        generation_prompt = body.add_generation_prompt
        if body.continue_final_message and not messages[-1]["content"]:
            messages, generation_prompt = messages[:-1], True  # nothing to extend yet
        try:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=generation_prompt)
        except Exception as exc:  # a template may reject a conversation (e.g. role order)
            raise EngineError(400, f"chat template rejected the messages: {exc}", "messages")
        if body.continue_final_message and not generation_prompt:
            text = _cut_after_final(text, messages[-1]["content"])
        return self.tokenizer.encode(text)

    def adapter_of(self, model: str | None) -> tuple[str | None, bytes | None]:
        """(adapter name, prefix-cache key) for a request naming a loaded adapter. The key holds
        the load time, so KV blocks never outlive the adapter load that computed them."""
        loaded = self.adapters.get(model) if model else None
        if loaded is None:
            return None, None
        return loaded.name, f"{loaded.name}@{loaded.loaded_at!r}".encode()

    def tokenize(self, body: TokenizeRequest) -> list[int]:
        if body.messages is not None:
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=body.add_generation_prompt)
            return self.tokenizer.encode(text)
        if body.prompt is None:
            raise EngineError(400, "give either prompt or messages", param="prompt")
        return self.tokenizer.encode(body.prompt)

    def completion_prompt(self, body: CompletionRequest) -> list[int]:
        if isinstance(body.prompt, list):
            if any(t < 0 or t >= self.tokenizer.vocab_size for t in body.prompt):
                raise EngineError(400, "prompt contains token ids outside the vocabulary", "prompt")
            return list(body.prompt)
        return self.tokenizer.encode(body.prompt)

    async def run(self, request: Request, body, prompt_ids: list[int], kind: str) -> Response:
        param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
        max_tokens = resolve_max_tokens(len(prompt_ids), body.requested_max_tokens(),
                                        self.max_model_len, param)
        params = body.sampling_params(max_tokens)
        if any(t < 0 or t >= self.tokenizer.vocab_size for t in params.logit_bias):
            raise EngineError(400, "logit_bias names token ids outside the vocabulary "
                              f"(0..{self.tokenizer.vocab_size - 1})", "logit_bias")
        await attach_grammar(params, body, self.tokenizer,
                             getattr(getattr(self.engine, "engine", None), "executor", None))
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        request_id = f"{prefix}-{request.headers.get('x-request-id') or uuid.uuid4().hex}"
        lora, cache_key = self.adapter_of(body.model)
        chunks = traced_outputs(generate_text(self.engine, self.tokenizer, request_id, prompt_ids,
                                              params, priority=body.priority, extra_key=cache_key,
                                              lora=lora))
        if kind == "chat" and body.active_tools():
            chunks = tool_call_chunks(chunks)
        try:  # errors before the first token keep their HTTP status
            first = await anext(chunks)
        except StopAsyncIteration:
            raise EngineError(503, "the engine is shutting down", code=ErrorCode.ENGINE_UNAVAILABLE,
                              kind="server_error") from None
        echo = ""
        if kind != "chat" and getattr(body, "echo", False):
            echo = body.prompt if isinstance(body.prompt, str) else self.tokenizer.decode(prompt_ids)
        render = _Renderer(kind, request_id, self.served_name, self.tokenizer,
                           params.logprobs is not None, echo)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(render.stream(first, chunks, include_usage),
                                     media_type="text/event-stream",
                                     headers={"x-request-id": request_id})
        text, last, logprobs, calls = first.text, first, list(first.logprobs), first.tool_calls
        async for chunk in chunks:
            text += chunk.text
            last = chunk
            logprobs += chunk.logprobs
            calls = calls + chunk.tool_calls
        return JSONResponse(render.full(text, last, logprobs, merge_deltas(calls)),
                            headers={"x-request-id": request_id})


class _Renderer:
    def __init__(self, kind: str, request_id: str, model: str, tokenizer,
                 with_logprobs: bool = False, echo: str = ""):
        self.kind, self.id, self.model = kind, request_id, model
        self.tokenizer, self.with_logprobs, self.echo = tokenizer, with_logprobs, echo
        self.created = int(time.time())
        self.object = "chat.completion" if kind == "chat" else "text_completion"
        self.offset = len(echo)  # completions' text_offset of the next token

    def _logprobs(self, entries: list) -> dict | None:
        if not self.with_logprobs:
            return None
        if self.kind == "chat":
            return chat_logprobs(entries, self.tokenizer)
        rendered = completion_logprobs(entries, self.tokenizer, self.offset)
        self.offset += sum(len(t) for t in rendered["tokens"])
        return rendered

    def _choice(self, text: str, finish: str | None, delta: bool, logprobs: list,
                tool_calls: list[dict] | None = None) -> dict:
        if self.kind != "chat":
            return {"index": 0, "text": text, "finish_reason": finish,
                    "logprobs": self._logprobs(logprobs)}
        key = "delta" if delta else "message"
        content = {"content": text} if delta else {"role": "assistant", "content": text}
        if tool_calls:  # streaming: delta.tool_calls entries; whole message: the calls
            content["tool_calls"] = tool_calls
            content["content"] = text or None
        return {"index": 0, key: content, "finish_reason": finish,
                "logprobs": self._logprobs(logprobs)}

    def _envelope(self, choices: list, stream: bool) -> dict:
        obj = self.object + (".chunk" if stream and self.kind == "chat" else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices}

    def full(self, text: str, last: TextChunk, logprobs: list,
             tool_calls: list[dict] | None = None) -> dict:
        choice = self._choice(self.echo + text, last.finish_reason, False, logprobs, tool_calls)
        body = self._envelope([choice], False)
        body["usage"] = _usage(last)
        return body

    async def stream(self, first: TextChunk, rest: AsyncIterator[TextChunk],
                     include_usage: bool) -> AsyncIterator[bytes]:
        if self.kind == "chat":
            head = {"index": 0, "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None, "logprobs": None}
            yield _sse(self._envelope([head], True))
        last = first
        if self.echo:
            yield _sse(self._envelope([self._choice(self.echo, None, True, [])], True))
        if first.text or first.finish_reason or first.tool_calls:
            yield _sse(self._envelope([self._choice(first.text, first.finish_reason, True,
                                                    first.logprobs, first.tool_calls)], True))
        async for chunk in rest:
            last = chunk
            if not (chunk.text or chunk.finish_reason or chunk.tool_calls or chunk.logprobs):
                continue  # all of it held back by the tool-call parser
            yield _sse(self._envelope([self._choice(chunk.text, chunk.finish_reason, True,
                                                    chunk.logprobs, chunk.tool_calls)], True))
        if include_usage:
            tail = self._envelope([], True)
            tail["usage"] = _usage(last)
            yield _sse(tail)
        yield b"data: [DONE]\n\n"


def create_engine_app(engine, tokenizer, served_name: str, max_model_len: int,
                      metrics_registry=None, adapters: AdapterRegistry | None = None,
                      api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="Inferplane built-in engine", docs_url=None, redoc_url=None,
                  **NATIVE_TRACING_OFF)
    app.add_middleware(EngineTraceMiddleware)
    if api_key:  # outermost: nothing runs for an unauthenticated request
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    adapters = adapters or AdapterRegistry()
    service = EngineService(engine, tokenizer, served_name, max_model_len, adapters)
    app.state.service = service
    app.include_router(adapter_router(adapters))

    install_error_handlers(app)
    # An embedding model is served by embeddings/server.py; this model answers a clear 400.
    app.include_router(unsupported_router("/v1/embeddings", "embeddings", served_name))

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request):
        service.check_generation(body)
        return await service.run(request, body, service.chat_prompt(body), "chat")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        service.check_generation(body)
        return await service.run(request, body, service.completion_prompt(body), "completion")

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        service.check_model(body.model)
        tokens = service.tokenize(body)
        return {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens}

    @app.get("/v1/models")
    async def models():
        card = {"id": served_name, "object": "model", "created": 0, "owned_by": "inferplane",
                "max_model_len": max_model_len}
        return {"object": "list", "data": [card, *adapters.model_cards(served_name, max_model_len)]}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/kv/summary")
    async def kv_summary():
        return engine.kv_summary()

    @app.get("/stats")
    async def stats():
        return engine.stats()

    return app


def _cut_after_final(text: str, final: str) -> str:
    """The rendered conversation up to the end of the final message's text, so generation
    continues that message instead of closing it (vLLM does the same)."""
    end = text.rfind(final)
    if end < 0:
        raise EngineError(400, "continue_final_message: the chat template does not keep the "
                          "final message's text", "messages")
    return text[:end + len(final)]

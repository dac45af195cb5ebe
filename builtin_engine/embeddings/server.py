"""The builtin engine serving an embedding model: POST /v1/embeddings (OpenAI shape), models,
health, metrics (vLLM names) and /tokenize.

    embedder = load_embedder(model_dir)
    app = create_embedding_app(embedder, "all-minilm-l6-v2", api_key=None)
    # a generating engine answers /v1/embeddings with a clear 400 instead
    # (serving/app_setup.unsupported_router)
"""
from __future__ import annotations

import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)

from builtin_engine.embeddings.batcher import EmbeddingBatcher
from builtin_engine.embeddings.protocol import EmbeddingRequest, embeddings_body
from builtin_engine.errors import EngineError
from builtin_engine.serving.api_key import ApiKeyMiddleware
from builtin_engine.serving.app_setup import (NATIVE_TRACING_OFF, install_error_handlers,
                                              unsupported_router)
from builtin_engine.serving.protocol import TokenizeRequest
from builtin_engine.serving.tracing import EngineTraceMiddleware
from common.error_codes import ErrorCode

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EmbeddingMetrics:
    """The vLLM metrics a pooling model exports (the gateway's load poller reads running and
    waiting; dashboards read the token and request counters)."""

    def __init__(self, model_name: str, batcher: EmbeddingBatcher | None = None):
        self.registry = r = CollectorRegistry()
        labels = ["model_name"]
        running = Gauge("vllm:num_requests_running", "Inputs in the forward pass.", labels,
                        registry=r).labels(model_name)
        waiting = Gauge("vllm:num_requests_waiting", "Inputs waiting for a forward pass.",
                        labels, registry=r).labels(model_name)
        if batcher is not None:
            running.set_function(lambda: batcher.running)
            waiting.set_function(lambda: batcher.waiting)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens embedded.", labels,
                                     registry=r).labels(model_name)
        self.success = Counter("vllm:request_success", "Finished requests by finish reason.",
                               labels + ["finished_reason"], registry=r).labels(model_name, "stop")
        self.latency = Histogram("vllm:e2e_request_latency_seconds", "Request latency.", labels,
                                 buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.batches = Counter("inferplane_embedding_batches", "Forward passes run.", labels,
                               registry=r).labels(model_name)
        self.batch_inputs = Counter("inferplane_embedding_batch_inputs",
                                    "Inputs embedded in forward passes.", labels,
                                    registry=r).labels(model_name)

    def batch_done(self, inputs: int, tokens: int) -> None:
        self.batches.inc()
        self.batch_inputs.inc(inputs)


class EmbeddingService:
    def __init__(self, embedder, served_name: str, batcher: EmbeddingBatcher,
                 metrics: EmbeddingMetrics):
        self.embedder, self.served_name = embedder, served_name
        self.batcher, self.metrics = batcher, metrics

    def check(self, body: EmbeddingRequest) -> None:
        if body.model and body.model != self.served_name:
            raise EngineError(404, f"The model `{body.model}` does not exist.", param="model",
                              code=ErrorCode.MODEL_NOT_FOUND)
        if body.dimensions is not None and body.dimensions != self.embedder.dimensions:
            raise EngineError(400, f"The model `{self.served_name}` does not support "
                              f"`dimensions` other than its own ({self.embedder.dimensions}).",
                              param="dimensions", code=ErrorCode.UNSUPPORTED_PARAMETER)

    def token_ids(self, body: EmbeddingRequest) -> list[list[int]]:
        """Each input's token ids (texts get the model's special tokens), length-checked."""
        inputs = body.inputs()
        if isinstance(inputs[0], str):
            ids = [self.embedder.encode_text(text) for text in inputs]
        else:
            vocab = self.embedder.vocab_size
            if any(t < 0 or t >= vocab for seq in inputs for t in seq):
                raise EngineError(400, f"input contains token ids outside the vocabulary "
                                  f"(0..{vocab - 1})", param="input")
            ids = inputs
        limit = self.embedder.max_input_tokens
        for index, seq in enumerate(ids):
            if len(seq) > limit:
                raise EngineError(400, f"This model's maximum context length is {limit} tokens, "
                                  f"however you requested {len(seq)} tokens (input {index}). "
                                  "Please reduce the length of the input.",
                                  param="input", code=ErrorCode.CONTEXT_LENGTH_EXCEEDED)
        return ids

    async def embed(self, body: EmbeddingRequest) -> dict:
        started = time.monotonic()
        self.check(body)
        ids = self.token_ids(body)
        vectors = await self.batcher.embed(ids)
        prompt_tokens = sum(len(seq) for seq in ids)
        self.metrics.prompt_tokens.inc(prompt_tokens)
        self.metrics.success.inc()
        self.metrics.latency.observe(time.monotonic() - started)
        return embeddings_body(vectors, body.encoding_format, self.served_name, prompt_tokens)


def create_embedding_app(embedder, served_name: str, api_key: str | None = None,
                         max_batch_tokens: int = 16384) -> FastAPI:
    app = FastAPI(title="Inferplane built-in engine (embeddings)", docs_url=None,
                  redoc_url=None, **NATIVE_TRACING_OFF)
    app.add_middleware(EngineTraceMiddleware)
    if api_key:  # outermost: nothing runs for an unauthenticated request
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    install_error_handlers(app)
    batcher = EmbeddingBatcher(embedder, max_batch_tokens=max_batch_tokens)
    metrics = EmbeddingMetrics(served_name, batcher)
    batcher.metrics = metrics
    service = EmbeddingService(embedder, served_name, batcher, metrics)
    app.state.service, app.state.batcher = service, batcher
    max_len = embedder.max_input_tokens
    for path, what in (("/v1/chat/completions", "chat completions"),
                       ("/v1/completions", "completions")):
        app.include_router(unsupported_router(path, what, served_name))

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest, request: Request):
        batcher.start()  # idempotent: the worker lives on the server's loop
        request_id = f"embd-{request.headers.get('x-request-id') or uuid.uuid4().hex}"
        return JSONResponse(await service.embed(body), headers={"x-request-id": request_id})

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        service.check(EmbeddingRequest(input="-", model=body.model))
        if body.prompt is None:
            raise EngineError(400, "an embedding model tokenizes a prompt", param="prompt")
        tokens = embedder.encode_text(body.prompt)
        return {"count": len(tokens), "max_model_len": max_len, "tokens": tokens}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": 0,
                                            "owned_by": "inferplane", "max_model_len": max_len}]}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

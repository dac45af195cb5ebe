"""`inferplane engine serve` for an embedding model (detected, or `--task embed`).

    model_dir = embedding_dir_for(args.model, args.task)   # None: serve it as a generator
    if model_dir is not None:
        return serve_embeddings(args, sock, model_dir)
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from builtin_engine.embeddings.model import embedding_model_dir, load_embedder


def embedding_dir_for(model_ref: str, task: str) -> Path | None:
    """The embedding model's directory; None when `task` is auto and the model generates."""
    model_dir = embedding_model_dir(model_ref)
    if model_dir is None and task == "embed":
        raise SystemExit(f"[engine] error: --task embed: {model_ref!r} is not an embedding model "
                         "(a sentence-transformers or BERT directory, or a known name)")
    return model_dir


def _dtype(name: str):
    import torch

    # auto is float32: encoders are small and bf16 would cost parity with sentence-transformers.
    from builtin_engine.loader import torch_dtype
    return torch.float32 if name == "auto" else torch_dtype(name)


def serve_embeddings(args: argparse.Namespace, sock, model_dir: Path) -> int:
    import uvicorn
    from fastapi import FastAPI

    from builtin_engine.embeddings.server import create_embedding_app
    from builtin_engine.serving.cli_options import LoadProgress, connection_limits_from_args
    from builtin_engine.serving.tracing import setup_engine_tracing
    from common.connections import uvicorn_config

    started = time.monotonic()
    embedder = load_embedder(model_dir, device=args.device, dtype=_dtype(args.dtype),
                             progress=LoadProgress())
    served = args.served_model_name or args.model
    print(f"[engine] {served} (embeddings, {embedder.dimensions} dimensions, "
          f"{embedder.pooling.mode} pooling{', normalised' if embedder.pooling.normalize else ''})"
          f" loaded in {time.monotonic() - started:.1f}s ({args.device})",
          file=sys.stderr, flush=True)
    setup_engine_tracing(f"inferplane-engine-{served}", args.otlp_endpoint)
    app = create_embedding_app(embedder, served, api_key=args.api_key,
                               max_batch_tokens=args.max_num_batched_tokens)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        app.state.batcher.start()
        print(f"[engine] ready: http://{args.host}:{args.port}/v1 serving {served}",
              file=sys.stderr, flush=True)
        yield
        await app.state.batcher.close()

    app.router.lifespan_context = lifespan
    config = uvicorn_config(app, connection_limits_from_args(args), log_level="warning",
                            loop="uvloop", timeout_graceful_shutdown=args.drain_timeout)
    uvicorn.Server(config).run(sockets=[sock])
    return 0

"""`inferplane engine serve`: load a model (or the simulated executor) and serve it over HTTP."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time

from builtin_engine.core.config import EngineConfig
from builtin_engine.serving.api_key import API_KEY_ENV
from builtin_engine.serving.cli_options import LoadProgress, connection_limits_from_args
from common.connections import ConnectionLimits

log = logging.getLogger("inferplane.engine")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    d = EngineConfig()
    p.add_argument("--model", default=d.model, help="known name, .gguf file or HF directory")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--task", default="auto", choices=["auto", "generate", "embed"],
                   help="auto: embed for a sentence-transformers / BERT encoder directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--device", default=d.device)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"],
                   help="auto: bfloat16 on CPUs with native bf16 dot products, else float32")
    p.add_argument("--quantization", default=None, choices=["int8"],
                   help="weight-only int8 linear layers")
    p.add_argument("--speculative-ngram", type=int, default=0,
                   help="n-gram size for prompt-lookup speculative decoding (0 = off)")
    p.add_argument("--num-speculative-tokens", type=int, default=d.num_speculative_tokens)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--num-blocks", type=int, default=None)
    p.add_argument("--kv-cache-memory", type=float, default=d.kv_cache_memory_gib, help="GiB (CPU)")
    p.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--long-prefill-token-threshold", type=int, default=d.long_prefill_token_threshold)
    p.add_argument("--decode-prefill-budget", type=int, default=None,
                   help="prefill tokens per step while requests decode (0 = no bound; "
                        "default by device)")
    p.add_argument("--decode-prefill-ratio", type=int, default=None,
                   help="prefill tokens per decoding request per step until the step costs "
                        "are learnt (default by device: 12 on CPU)")
    p.add_argument("--prefill-itl-stretch", type=float, default=d.prefill_itl_stretch,
                   help="while requests decode, a step with prefill may take at most this "
                        "times the decode rows' own time (<= 1: the fixed ratio)")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--preemption-mode", default=d.preemption_mode, choices=["recompute", "swap", "auto"])
    p.add_argument("--swap-space", type=float, default=d.swap_space_gib, help="GiB of CPU swap")
    p.add_argument("--attention-backend", default=None, choices=["torch", "triton"])
    p.add_argument("--kernels", default=None, choices=["torch", "triton"])
    p.add_argument("--decode-graphs", default=d.decode_graphs, choices=["auto", "off", "static"],
                   help="CUDA graphs for decode steps (auto: on CUDA with Triton attention)")
    p.add_argument("--enforce-eager", action="store_true", help="same as --decode-graphs off")
    p.add_argument("--compile", default=None, action=argparse.BooleanOptionalAction,
                   help="torch.compile the decode step (default: on for CPU)")
    p.add_argument("--pack-weights", default=None, action=argparse.BooleanOptionalAction,
                   help="prepack projection weights for oneDNN matmuls (default: on for CPU)")
    p.add_argument("--compile-cache-dir", default=None,
                   help="compiled kernels' cache (default $INFERPLANE_DATA_DIR/inductor)")
    p.add_argument("--max-graph-batch", type=int, default=d.max_graph_batch,
                   help="largest decode batch replayed from a graph")
    p.add_argument("--simulate", action="store_true", help="run the scheduler without the model")
    p.add_argument("--sim-prefill-s-per-token", type=float, default=d.sim_prefill_s_per_token)
    p.add_argument("--sim-decode-base-s", type=float, default=d.sim_decode_base_s)
    p.add_argument("--sim-decode-s-per-seq", type=float, default=d.sim_decode_s_per_seq)
    p.add_argument("--sim-context-length", type=int, default=d.sim_context_length)
    p.add_argument("--max-loras", type=int, default=4, help="LoRA adapter slots")
    p.add_argument("--lora-load-cost-s", type=float, default=0.0,
                   help="simulated adapter load time")
    p.add_argument("--otlp-endpoint", default=None, help="export traces (OTLP/HTTP)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"Bearer key every route but /health and /metrics requires (prefer the "
                        f"{API_KEY_ENV} environment variable: argv is visible to every user)")
    p.add_argument("--lora-roots", action="append", default=[], metavar="DIR[,DIR...]",
                   help="directories /v1/load_lora_adapter may load from (none: refused)")
    c = ConnectionLimits()
    p.add_argument("--timeout-keep-alive", type=float, default=c.keep_alive_s,
                   help="seconds an idle keep-alive connection stays open")
    p.add_argument("--header-timeout", type=float, default=c.header_timeout_s,
                   help="seconds a connection has to send a request's headers")
    p.add_argument("--body-timeout", type=float, default=c.body_timeout_s,
                   help="longest pause (seconds) while a request body arrives")
    p.add_argument("--max-connections", type=int, default=c.max_connections,
                   help="open connections; more are answered 503")
    p.add_argument("--max-body-bytes", type=int, default=c.max_body_bytes)
    p.add_argument("--drain-timeout", type=float, default=10.0)
    p.add_argument("--log-level", default="info")


def config_from_args(a: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        model=a.model, served_model_name=a.served_model_name, device=a.device, dtype=a.dtype,
        seed=a.seed, block_size=a.block_size, num_blocks=a.num_blocks,
        kv_cache_memory_gib=a.kv_cache_memory, gpu_memory_utilization=a.gpu_memory_utilization,
        enable_prefix_caching=not a.no_prefix_caching,
        max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
        long_prefill_token_threshold=a.long_prefill_token_threshold, max_model_len=a.max_model_len,
        decode_prefill_budget=a.decode_prefill_budget, decode_prefill_ratio=a.decode_prefill_ratio,
        prefill_itl_stretch=a.prefill_itl_stretch,
        preemption_mode=a.preemption_mode, swap_space_gib=a.swap_space,
        attention_backend=a.attention_backend, kernels=a.kernels, simulate=a.simulate,
        decode_graphs="off" if a.enforce_eager else a.decode_graphs,
        max_graph_batch=a.max_graph_batch, compile=a.compile, pack_weights=a.pack_weights,
        compile_cache_dir=a.compile_cache_dir, quantization=a.quantization,
        speculative_ngram=a.speculative_ngram,
        num_speculative_tokens=a.num_speculative_tokens,
        sim_prefill_s_per_token=a.sim_prefill_s_per_token, sim_decode_base_s=a.sim_decode_base_s,
        sim_decode_s_per_seq=a.sim_decode_s_per_seq, sim_context_length=a.sim_context_length)


def build_engine(config: EngineConfig):
    """Returns (engine, tokenizer, served_name, max_model_len)."""
    from builtin_engine.core.engine import AsyncEngine
    from builtin_engine.loader.tokenizer import load_tokenizer

    started = time.monotonic()
    if config.simulate:
        from builtin_engine.core.simulator import SimulatedExecutor
        tokenizer = load_tokenizer(config.model)
        executor = SimulatedExecutor(config)
        context = config.sim_context_length
    else:
        from builtin_engine.loader import load_model, torch_dtype
        from builtin_engine.runner.lora import LoraStore
        from builtin_engine.runner.model_runner import ModelRunner
        loaded = load_model(config, progress=LoadProgress())
        tokenizer, context = loaded.tokenizer, loaded.context_length
        # Shared with the AdapterRegistry (see lora_store_of): it loads, the runner applies.
        store = LoraStore(loaded.llama_config, config.device, torch_dtype(config.dtype))
        executor = ModelRunner(config, loaded, lora_store=store)
        print(f"[engine] {executor.describe()}", file=sys.stderr, flush=True)
    config.max_model_len = min(config.max_model_len or context, context)
    engine = AsyncEngine(config, executor, tokenizer)  # may lower max_model_len to the KV room
    served = config.served_model_name or config.model
    print(f"[engine] {served} loaded in {time.monotonic() - started:.1f}s "
          f"({'simulated' if config.simulate else config.device})", file=sys.stderr, flush=True)
    return engine, tokenizer, served, engine.max_model_len


def lora_store_of(engine):
    """The LoraStore of a real engine's model runner; None for the simulated engine."""
    return getattr(engine.engine.executor, "lora_store", None)


def lora_roots_from_args(a: argparse.Namespace) -> list[str]:
    return [r for arg in a.lora_roots for r in arg.split(",") if r]


def serve(args: argparse.Namespace) -> int:
    from common.connections import PortInUse, listen_socket, uvicorn_config

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:  # before the model loads: a port in use must not cost a load and a false "ready"
        sock = listen_socket(args.host, args.port)
    except PortInUse as exc:
        print(f"[engine] error: {exc}", file=sys.stderr, flush=True)
        return 1
    import uvicorn
    from fastapi import FastAPI

    from builtin_engine.runner.openmp_pool import release_openmp_pool
    from builtin_engine.serving.server import create_engine_app

    if args.task != "generate":
        from builtin_engine.embeddings.cli import embedding_dir_for, serve_embeddings
        model_dir = embedding_dir_for(args.model, args.task)
        if model_dir is not None:
            return serve_embeddings(args, sock, model_dir)
    config = config_from_args(args)
    engine, tokenizer, served, max_len = build_engine(config)
    real_model = not config.simulate
    from builtin_engine.serving.tracing import setup_engine_tracing

    setup_engine_tracing(f"inferplane-engine-{served}", args.otlp_endpoint)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        engine.start()
        if real_model:
            # The engine thread runs every step from here on: the pool this thread opened
            # while loading would halve its speed (runner/openmp_pool.py).
            if not release_openmp_pool():
                log.info("the main thread's OpenMP pool stays (libgomp not found)")
        print(f"[engine] ready: http://{args.host}:{args.port}/v1 serving {served}",
              file=sys.stderr, flush=True)
        yield
        await engine.shutdown(args.drain_timeout)

    from builtin_engine.serving.adapters import AdapterRegistry

    adapters = AdapterRegistry(args.max_loras, args.lora_load_cost_s, store=lora_store_of(engine),
                               roots=lora_roots_from_args(args))
    app = create_engine_app(engine, tokenizer, served, max_len,
                            metrics_registry=engine.metrics_registry, adapters=adapters,
                            api_key=args.api_key)
    app.router.lifespan_context = lifespan
    config = uvicorn_config(app, connection_limits_from_args(args), log_level="warning",
                            loop="uvloop", timeout_graceful_shutdown=args.drain_timeout)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferplane engine")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="serve a model over the OpenAI API"))
    args = parser.parse_args(argv)
    return serve(args)

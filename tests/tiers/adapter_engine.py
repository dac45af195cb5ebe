"""A simulated builtin engine with the runtime LoRA routes mounted, as `serve` does once
builtin_engine/server.py includes builtin_engine.adapters.router (then this adds nothing).

python -m tests.tiers.adapter_engine --simulate --port P [--max-loras N] [serve flags...]
"""
from __future__ import annotations

import argparse
import contextlib

import uvicorn
from fastapi import FastAPI

from builtin_engine.adapters import AdapterRegistry, router
from builtin_engine.cli import add_serve_arguments, build_engine, config_from_args
from builtin_engine.server import create_engine_app


def main() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    if not any("--max-loras" in a.option_strings for a in parser._actions):
        parser.add_argument("--max-loras", type=int, default=2)
        parser.add_argument("--lora-load-cost-s", type=float, default=0.0)
    args = parser.parse_args()
    engine, tokenizer, served, max_len = build_engine(config_from_args(args))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        engine.start()
        yield
        await engine.shutdown(1.0)

    app = create_engine_app(engine, tokenizer, served, max_len)
    if not any(getattr(r, "path", None) == "/v1/load_lora_adapter" for r in app.routes):
        app.include_router(router(AdapterRegistry(args.max_loras, args.lora_load_cost_s)))
    app.router.lifespan_context = lifespan
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

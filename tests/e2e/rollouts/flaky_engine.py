"""A candidate engine that fails a fixed share of its generations with HTTP 500.

Run: python -m tests.e2e.rollouts.flaky_engine --port P --name NAME --fail-ratio 0.3

It is tests/gateway/fake_engine.py (answers "tok0 tok1 ...", so its text is recognisable in a
client's response) behind two additions: GET /v1/models, which the control plane's health
prober needs before it routes to a backend, and the failures. Failures are spread evenly
rather than drawn at random (request n fails when floor((n+1)·r) > floor(n·r)): an interval
of the analysis always sees the configured rate, and below r = 0.5 two failures are never
adjacent, so the gateway's circuit breaker stays closed and every failure reaches the
version's metrics. GET /flaky-stats reports {"requests", "failed"}.
"""
from __future__ import annotations

import argparse
import math

import uvicorn
from starlette.responses import JSONResponse

from tests.gateway.fake_engine import build_app as build_fake_engine

GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")


def fails(n: int, ratio: float) -> bool:
    return math.floor((n + 1) * ratio) > math.floor(n * ratio)


def build_app(name: str, fail_ratio: float):
    inner = build_fake_engine(name)
    stats = {"requests": 0, "failed": 0}

    def answer(scope) -> JSONResponse | None:
        path = scope["path"]
        if path == "/v1/models":
            return JSONResponse({"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "test"}]})
        if path == "/flaky-stats":
            return JSONResponse(stats)
        if scope["method"] != "POST" or path not in GENERATION_PATHS:
            return None
        n = stats["requests"]
        stats["requests"] += 1
        if not fails(n, fail_ratio):
            return None
        stats["failed"] += 1
        return JSONResponse({"error": {"message": f"injected failure of request {n}",
                                       "type": "server_error", "param": None, "code": None}},
                            status_code=500)

    async def app(scope, receive, send):
        if scope["type"] == "http":
            response = answer(scope)
            if response is not None:
                await response(scope, receive, send)
                return
        await inner(scope, receive, send)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="flaky")
    parser.add_argument("--fail-ratio", type=float, default=0.3)
    args = parser.parse_args()
    if not 0.0 <= args.fail_ratio < 1.0:
        parser.error(f"--fail-ratio must be in [0, 1); got {args.fail_ratio}")
    uvicorn.run(build_app(args.name, args.fail_ratio), host="127.0.0.1", port=args.port,
                log_level="warning", loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()

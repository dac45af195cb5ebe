"""An OpenAI-shaped engine with a fixed cost: `--slots` requests run at once, each for
`--delay-s`; the rest wait in its queue (first come, first served), as on a busy GPU.

    python bench/_slot_engine.py --port P --slots 8 --delay-s 0.05

Answers every chat/completions call with bench/_mock_engine.py's body (non-streaming only).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mock_engine import COMPLETION, HEALTH, JSON_HEADERS, METRICS, _read_body, _small  # noqa: E402


def build_app(slots: int, delay_s: float):
    gate: asyncio.Semaphore | None = None

    async def app(scope, receive, send) -> None:
        nonlocal gate
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path in ("/health", "/v1/models"):
            return await _small(send, 200, HEALTH, b"application/json")
        if path == "/metrics":
            return await _small(send, 200, METRICS, b"text/plain")
        await _read_body(receive)
        gate = gate or asyncio.Semaphore(slots)
        async with gate:
            await asyncio.sleep(delay_s)
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": COMPLETION})
    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--delay-s", type=float, default=0.05)
    args = parser.parse_args()
    uvicorn.run(build_app(args.slots, args.delay_s), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", log_level="warning", access_log=False,
                lifespan="on", backlog=4096)


if __name__ == "__main__":
    main()

"""Gateway overhead: a fast mock engine called directly vs through the gateway.

    python bench/gateway_overhead.py [--rates 100,500,1000] [--duration 10] [--stream both]

Open-loop load at each fixed rate (requests start on schedule whether or not earlier ones
finished), then a closed-loop run to find the maximum sustainable RPS. Prints, per rate and
mode, the latency the gateway adds at P50/P95/P99 (through-gateway minus direct).
Engine and gateway run as separate uvicorn processes (uvloop + httptools).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SECRET = "ip-bench-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_gateway(port: int, engine_port: int) -> None:
    """Child process: the gateway with a static snapshot pointing at the mock engine."""
    import uvicorn

    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings
    from registry.keys import hash_key
    from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot

    b = BackendView(id="mock", url=f"http://127.0.0.1:{engine_port}/v1", engine="vllm",
                    served_model="mock", gpu=None, weight=1.0, tier="hot", state="ready",
                    adapters=(), version="v1")
    m = ModelView(name="mock", context_length=8192, backends=(b,), routing="least_loaded",
                  fallbacks=(), tier="hot", price_in_per_1k=0.0, price_out_per_1k=0.0, splits=())
    k = KeyView(key_id=1, key_hash=hash_key(SECRET), name="bench", team="bench", role="user",
                models=None, rpm_limit=None, tpm_limit=None, max_budget=None,
                priority="standard", expires_at=None, revoked=False)

    class Source:
        current = RoutingSnapshot(version=1, models={"mock": m}, aliases={}, keys={k.key_hash: k})

    settings = GatewaySettings(routing={"load_poll_interval_s": 0},
                               admission={"queue_size": 100_000,
                                          "max_inflight_per_backend": 100_000})
    uvicorn.run(create_gateway_app(settings, Source()), host="127.0.0.1", port=port,
                log_level="warning", loop="uvloop", http="httptools", access_log=False)


def spawn(args: list[str], health: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(health, trust_env=False, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{args} did not start")


async def one(client: httpx.AsyncClient, url: str, stream: bool) -> float | None:
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "stream": stream}
    start = time.perf_counter()
    try:
        if stream:
            async with client.stream("POST", url, json=body) as r:
                async for _ in r.aiter_raw():
                    pass
                ok = r.status_code == 200
        else:
            ok = (await client.post(url, json=body)).status_code == 200
    except httpx.HTTPError:
        return None
    return time.perf_counter() - start if ok else None


async def open_loop(url: str, rate: float, duration: float, stream: bool) -> list[float | None]:
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=4096)
    async with httpx.AsyncClient(limits=limits, trust_env=False, timeout=60,
                                 headers={"authorization": f"Bearer {SECRET}"}) as client:
        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * duration)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(client, url, stream)))
        return await asyncio.gather(*tasks)


async def closed_loop(url: str, concurrency: int, duration: float, stream: bool) -> float:
    done = 0
    end = time.perf_counter() + duration
    async with httpx.AsyncClient(trust_env=False, timeout=60,
                                 headers={"authorization": f"Bearer {SECRET}"}) as client:
        async def worker():
            nonlocal done
            while time.perf_counter() < end:
                if await one(client, url, stream) is not None:
                    done += 1
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / duration


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(label: str, direct: list, through: list) -> None:
    d = [v for v in direct if v is not None]
    g = [v for v in through if v is not None]
    errors = len(through) - len(g)
    added = [(pct(g, q) - pct(d, q)) * 1000 for q in (0.5, 0.95, 0.99)]
    print(f"{label:<28} added P50 {added[0]:7.2f} ms  P95 {added[1]:7.2f} ms  "
          f"P99 {added[2]:7.2f} ms  (gateway P50 {pct(g, .5)*1000:.2f} ms, errors {errors})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="100,500,1000")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--stream", choices=["yes", "no", "both"], default="both")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--serve-gateway", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        serve_gateway(*args.serve_gateway)
        return
    engine_port, gateway_port = free_port(), free_port()
    procs = [spawn(["-m", "tests.gateway.fake_engine", "--port", str(engine_port), "--name",
                    "mock"], f"http://127.0.0.1:{engine_port}/health")]
    try:
        procs.append(spawn([__file__, "--serve-gateway", str(gateway_port), str(engine_port)],
                           f"http://127.0.0.1:{gateway_port}/healthz"))
        direct = f"http://127.0.0.1:{engine_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        modes = {"yes": [True], "no": [False], "both": [False, True]}[args.stream]
        for stream in modes:
            kind = "stream" if stream else "non-stream"
            for rate in (float(r) for r in args.rates.split(",")):
                d = asyncio.run(open_loop(direct, rate, args.duration, stream))
                g = asyncio.run(open_loop(through, rate, args.duration, stream))
                report(f"{kind} @ {rate:.0f} RPS", d, g)
            d_max = asyncio.run(closed_loop(direct, args.concurrency, args.duration, stream))
            g_max = asyncio.run(closed_loop(through, args.concurrency, args.duration, stream))
            print(f"{kind} max sustainable RPS: direct {d_max:.0f}, through gateway {g_max:.0f}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()

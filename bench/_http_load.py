"""A lean HTTP/1.1 load generator (uvloop, raw keep-alive sockets, pre-encoded requests), run in
its own process so its CPU is not charged to the server under test.

    python bench/_http_load.py --url http://127.0.0.1:P/v1/chat/completions --rate 500 \
        --duration 10 [--stream] [--key SECRET]

Open loop: request i is sent at t0 + i/rate whether or not earlier ones finished (no
coordinated omission). Latency is measured from the scheduled time, so a generator that falls
behind shows up as latency rather than hiding it; `lag_p99_ms` says how late sends were.
Prints one JSON object: latencies (seconds), errors, achieved rate.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import deque
from urllib.parse import urlsplit

import orjson


def build_request(url: str, body: dict, key: str | None) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    payload = orjson.dumps(body)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n")
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    return parts.hostname, parts.port, (head + "\r\n").encode() + payload


async def read_response(reader: asyncio.StreamReader) -> int:
    """Status code of one complete response (Content-Length or chunked body consumed)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return status
    cut = lower.find(b"content-length:")
    length = int(lower[cut + 15:lower.find(b"\r\n", cut)]) if cut >= 0 else 0
    await reader.readexactly(length)
    return status


class Pool:
    """Idle keep-alive connections, most recently used first (as HTTP clients' pools reuse
    them: a few hot connections carry the load, so a multi-worker server's split between its
    workers is up to where those few landed), or with `spread` least recently used first
    (every warm connection in turn, as many separate clients would)."""

    def __init__(self, host: str, port: int, spread: bool = False):
        self.host, self.port, self.spread = host, port, spread
        self.idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = deque()

    async def call(self, request: bytes) -> int:
        while True:   # idle connections the server closed meanwhile are dropped, not errors
            fresh = not self.idle
            conn = self._take() if self.idle else await asyncio.open_connection(
                self.host, self.port)
            try:
                conn[1].write(request)
                status = await read_response(conn[0])
            except (ConnectionError, asyncio.IncompleteReadError):
                conn[1].close()
                if fresh:
                    raise
                continue
            self.idle.append(conn)
            return status

    def _take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return self.idle.popleft() if self.spread else self.idle.pop()

    async def warm(self, request: bytes, n: int) -> None:
        await asyncio.gather(*(self.call(request) for _ in range(n)))

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


async def open_loop(pool: Pool, request: bytes, rate: float, duration: float) -> dict:
    total = int(rate * duration)
    latencies: list[float] = []
    lags: list[float] = []
    errors: dict[str, int] = {}   # status code or exception name -> count

    async def one(scheduled: float) -> None:
        lags.append(time.perf_counter() - scheduled)
        try:
            status = await pool.call(request)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            status = type(exc).__name__
        if status == 200:
            latencies.append(time.perf_counter() - scheduled)
        else:
            errors[str(status)] = errors.get(str(status), 0) + 1

    tasks = []
    t0 = time.perf_counter() + 0.01
    sent = 0
    while sent < total:
        now = time.perf_counter()
        while sent < total and t0 + sent / rate <= now:   # launch everything now due
            tasks.append(asyncio.ensure_future(one(t0 + sent / rate)))
            sent += 1
        await asyncio.sleep(max(0.0, t0 + sent / rate - time.perf_counter()))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    lags.sort()
    return {"latencies": latencies, "errors": sum(errors.values()), "error_kinds": errors,
            "sent": total,
            "achieved_rps": len(latencies) / elapsed,
            "lag_p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1000 if lags else 0.0}


async def main_async(args) -> dict:
    body = {"model": args.model, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "stream": args.stream}
    host, port, request = build_request(args.url, body, args.key)
    pool = Pool(host, port, spread=args.spread)
    try:
        await pool.warm(request, args.warm)
        return await open_loop(pool, request, args.rate, args.duration)
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--key", default=None)
    parser.add_argument("--model", default="mock")
    parser.add_argument("--warm", type=int, default=16, help="connections opened before timing")
    parser.add_argument("--spread", action="store_true",
                        help="use every warm connection in turn instead of the hottest first")
    args = parser.parse_args()
    import uvloop
    result = json.dumps(uvloop.run(main_async(args))).encode() + b"\n"
    write_all(sys.stdout.fileno(), result)


def write_all(fd: int, data: bytes) -> None:
    """Every byte of `data` to `fd`. The event loop can leave a shared pipe non-blocking, and
    a result far larger than the pipe's buffer (one latency per request at 3,000/s) would
    then be cut short by a partial write; waiting for the pipe to drain keeps it whole."""
    import os
    import select
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


if __name__ == "__main__":
    main()

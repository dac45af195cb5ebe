"""How much a running batch slows interactive traffic: the P99 latency of a steady
interactive load through `inferplane up`, alone and while a 1,000-request batch runs (same
run, same stack), printed as a ratio.

    python bench/batch_interference.py [--rate 20] [--phase-s 8] [--lines 1000]
                                       [--slots 8] [--delay-s 0.08] [--out result.json]

The engine (bench/_slot_engine.py) runs `--slots` requests at once for `--delay-s` each, and
the gateway admits as many per backend (admission.max_inflight_per_backend), so batch and
interactive requests really compete: for the engine's slots, in the gateway's admission
queue, where batch lines wait behind interactive requests (Priority.BATCH). A third phase
sends the same work as interactive requests from a client at the batch's concurrency, for
comparison: what interactive traffic would see without batch priority.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, free_port, percentile, wait_http, write_result  # noqa: E402

MODEL = "mock"


def chat_body(i: int) -> dict:
    return {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": f"q{i}"}]}


def start_stack(work: Path, args) -> tuple[list[subprocess.Popen], str, str]:
    engine_port, port = free_port(), free_port()
    engine = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_slot_engine.py"), "--port",
                               str(engine_port), "--slots", str(args.slots), "--delay-s",
                               str(args.delay_s)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{engine_port}/health", engine)
    config = {"data_dir": str(work / "data"), "models": [{
        "name": MODEL, "engine": "openai", "context_length": 4096,
        "backends": [{"url": f"http://127.0.0.1:{engine_port}/v1", "served_model": MODEL}]}],
        "gateway": {"log_level": "WARNING",
                    "admission": {"max_inflight_per_backend": args.slots,
                                  "queue_size": 4096},
                    "batches": {"concurrency": args.batch_concurrency, "poll_s": 0.1}}}
    (work / "inferplane.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "INFERPLANE_ADMIN_KEY"}
    up = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                           str(work / "inferplane.yaml"), "--port", str(port)], cwd=ROOT,
                          env=env, stdout=open(work / "up.log", "wb"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/readyz", up, timeout=180)
    admin = (work / "data" / "admin.key").read_text().strip()
    base = f"http://127.0.0.1:{port}"
    key = httpx.post(base + "/admin/v1/keys", headers={"Authorization": f"Bearer {admin}"},
                     json={"name": "bench"}, timeout=10).json()["secret"]
    deadline = time.monotonic() + 10
    while httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {key}"},
                    timeout=5).status_code == 401 and time.monotonic() < deadline:
        time.sleep(0.1)
    return [up, engine], base, key


async def interactive(client: httpx.AsyncClient, rate: float, seconds: float) -> dict:
    """Open loop: one request every 1/rate s for `seconds`; latencies of the 200s."""
    latencies: list[float] = []
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        started = time.perf_counter()
        resp = await client.post("/v1/chat/completions", json=chat_body(i))
        if resp.status_code == 200:
            latencies.append(time.perf_counter() - started)
        else:
            errors += 1

    tasks, t0 = [], time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return {"requests": len(tasks), "errors": errors,
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1)}


async def closed_loop(client: httpx.AsyncClient, concurrency: int, stop: asyncio.Event) -> int:
    """Standard-priority load at the batch's concurrency until `stop`: the comparison."""
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while not stop.is_set():
            await client.post("/v1/chat/completions", json=chat_body(sent))
            sent += 1
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent


def start_batch(base: str, key: str, lines: int) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    content = b"".join(json.dumps({"custom_id": f"b{i}", "method": "POST",
                                   "url": "/v1/chat/completions",
                                   "body": chat_body(i)}).encode() + b"\n"
                       for i in range(lines))
    made = httpx.post(base + "/v1/files", headers=headers, timeout=30, data={"purpose": "batch"},
                      files={"file": ("bench.jsonl", io.BytesIO(content))}).json()
    return httpx.post(base + "/v1/batches", headers=headers, timeout=30, json={
        "input_file_id": made["id"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"}).json()["id"]


def batch_state(base: str, key: str, batch_id: str) -> dict:
    return httpx.get(f"{base}/v1/batches/{batch_id}", timeout=10,
                     headers={"Authorization": f"Bearer {key}"}).json()


async def measure(base: str, key: str, args) -> dict:
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        await interactive(client, args.rate, 2.0)                       # warm-up
        alone = await interactive(client, args.rate, args.phase_s)
        batch_id = await asyncio.to_thread(start_batch, base, key, args.lines)
        while (await asyncio.to_thread(batch_state, base, key, batch_id))["status"] \
                == "validating":
            await asyncio.sleep(0.05)
        with_batch = await interactive(client, args.rate, args.phase_s)
        during = await asyncio.to_thread(batch_state, base, key, batch_id)
        deadline = time.monotonic() + 300
        while (final := await asyncio.to_thread(batch_state, base, key, batch_id))["status"] \
                not in ("completed", "failed") and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        stop = asyncio.Event()
        background = asyncio.create_task(closed_loop(client, args.batch_concurrency, stop))
        with_standard = await interactive(client, args.rate, args.phase_s)
        stop.set()
        await background
    return {"alone": alone, "with_batch": with_batch, "with_standard_load": with_standard,
            "batch": {"status": final["status"], "counts": final["request_counts"],
                      "done_when_phase_ended": during["request_counts"]["completed"],
                      "seconds": (final["completed_at"] or 0) - (final["in_progress_at"] or 0)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="interactive requests/s")
    parser.add_argument("--phase-s", type=float, default=8.0)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8, help="engine requests at once")
    parser.add_argument("--delay-s", type=float, default=0.08, help="engine time per request")
    parser.add_argument("--batch-concurrency", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        procs, base, key = start_stack(Path(tmp), args)
        try:
            result = asyncio.run(measure(base, key, args))
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    alone, with_batch = result["alone"]["p99_ms"], result["with_batch"]["p99_ms"]
    result["p99_ratio"] = round(with_batch / alone, 2) if alone else None
    result["p99_ratio_standard_load"] = round(
        result["with_standard_load"]["p99_ms"] / alone, 2) if alone else None
    result["config"] = vars(args)
    path = write_result("batch_interference", result, args.out)
    print(json.dumps({k: result[k] for k in ("alone", "with_batch", "with_standard_load",
                                              "batch")}, indent=1))
    print(f"interactive P99: {alone} ms alone, {with_batch} ms with a {args.lines}-line batch "
          f"running: ratio {result['p99_ratio']} (same load at standard priority: "
          f"{result['p99_ratio_standard_load']})")
    print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Routing strategies on a multi-tenant workload with shared system prompts.

    python bench/routing_bench.py [--strategies round_robin,least_loaded,p2c,prefix_aware]
        [--engines 4] [--tenants 8] [--system-tokens 1024] [--requests 320] [--rate 6]
        [--num-blocks 256] [--max-tokens 16]

Each tenant has its own long system prompt; each request adds a short, unique user message.
Per strategy, four fresh simulated builtin engines (realistic prefill/decode costs and a KV
cache small enough to evict) sit behind a real `inferplane gateway` process configured with
that strategy; the same open-loop (Poisson) request stream is replayed, streaming, and we
report TTFT P50/P90, throughput, and the prefix-cache hit rate the engines themselves counted
(vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total). The oracle hit rate is
computed from the workload: every tenant on one engine with an infinite cache, so all but a
tenant's first request hit its whole block-aligned shared prefix.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import WORDS  # noqa: E402

MODEL = "sim"
BLOCK_SIZE = 16
FIRST_TEXT = re.compile(r'"content":\s*"[^"]')


@dataclass
class Request:
    tenant: int
    arrival: float           # seconds after the start
    messages: list[dict]


@dataclass
class Result:
    ttft: float | None
    latency: float
    completion_tokens: int
    ok: bool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_process(args: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2.0, trust_env=False).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def build_workload(args) -> list[Request]:
    rng = random.Random(args.seed)
    # ~1.15 tokens per word of this text; each tenant's prompt is distinct from its first word.
    systems = [f"You are the assistant of tenant {t}. " + words(rng, int(args.system_tokens / 1.15))
               for t in range(args.tenants)]
    weights = [1.0 / (t + 1) ** args.skew for t in range(args.tenants)]
    t, out = 0.0, []
    for i in range(args.requests):
        t += rng.expovariate(args.rate)
        tenant = rng.choices(range(args.tenants), weights)[0]
        user = f"user {rng.randrange(args.users)} asks ({i}): " + words(rng, rng.randint(10, 40))
        out.append(Request(tenant, t, [{"role": "system", "content": systems[tenant]},
                                       {"role": "user", "content": user}]))
    return out


def oracle_hit_rate(engine_url: str, workload: list[Request],
                    block_size: int = BLOCK_SIZE) -> float:
    """Hits / queries if each tenant's requests shared one engine with an infinite cache."""
    seen: dict[int, list[int]] = {}
    lengths: list[int] = []
    hits = queries = 0
    with httpx.Client(timeout=30, trust_env=False) as client:
        for req in workload:
            tokens = client.post(f"{engine_url}/tokenize",
                                 json={"model": MODEL, "messages": req.messages}).json()["tokens"]
            queries += len(tokens)
            lengths.append(len(tokens))
            first = seen.setdefault(req.tenant, tokens)
            if first is tokens:
                continue
            common = next((i for i, (a, b) in enumerate(zip(first, tokens)) if a != b),
                          min(len(first), len(tokens)))
            hits += min(common, len(tokens) - 1) // block_size * block_size
    print(f"prompt tokens: mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}")
    return hits / queries


def engine_args(port: int, args) -> list[str]:
    return ["-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
            "--served-model-name", MODEL, "--num-blocks", str(args.num_blocks),
            "--sim-prefill-s-per-token", str(args.prefill_s_per_token),
            "--sim-decode-base-s", str(args.decode_base_s), "--max-num-seqs", "64",
            "--log-level", "warning"]


def start_engines(args, work: Path) -> tuple[list, list[int]]:
    ports = [free_port() for _ in range(args.engines)]
    procs = [start_process(engine_args(p, args), log_path=work / f"engine{i}.log")
             for i, p in enumerate(ports)]
    try:
        for proc, port in zip(procs, ports):
            wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
    except BaseException:
        for proc in procs:
            stop_process(proc)
        raise
    return procs, ports


def write_config(work: Path, ports: list[int], strategy: str, precise: bool = False) -> Path:
    backends = "".join(f"      - {{url: 'http://127.0.0.1:{p}/v1', engine: builtin, "
                       f"served_model: {MODEL}}}\n" for p in ports)
    config = work / f"{strategy}{'-precise' if precise else ''}.yaml"
    config.write_text(
        f"data_dir: {work / 'data'}\n"
        f"models:\n  - name: {MODEL}\n    engine: builtin\n    context_length: 4096\n"
        f"    backends:\n{backends}"
        f"routing: {{strategy: {strategy}, load_poll_interval_s: 0.5, "
        f"prefix_precise: {str(precise).lower()}}}\n"
        f"gateway:\n  admission: {{queue_size: 100000, max_inflight_per_backend: 100000}}\n")
    return config


def register(config: Path) -> str:
    """The model and its backends into the registry; a fresh key's secret."""
    from control_plane.bootstrap import register_models
    from control_plane.settings import load_settings
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    settings = load_settings(config)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url(), progress=None)
    register_models(make_session_factory(settings.resolved_database_url()), settings)
    out = subprocess.run([sys.executable, "-m", "control_plane", "keys", "create", "--name",
                          f"bench-{time.time_ns()}", "--config", str(config)], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1]


async def send(client: httpx.AsyncClient, url: str, req: Request, args, t0: float) -> Result:
    await asyncio.sleep(max(0.0, t0 + req.arrival - time.perf_counter()))
    start = time.perf_counter()
    body = {"model": MODEL, "messages": req.messages, "max_tokens": args.max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    ttft, tokens, ok = None, 0, False
    try:
        async with client.stream("POST", url, json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    ok = ok or line == "data: [DONE]"
                    continue
                # the first token, not a role chunk with empty content (vLLM sends one)
                if ttft is None and FIRST_TEXT.search(line):
                    ttft = time.perf_counter() - start
                if '"usage":{' in line:
                    # the field may close the usage object (vLLM puts it last)
                    tokens = int(re.match(r"\s*(\d+)", line.split('"completion_tokens":')[1])[1])
            ok = ok and r.status_code == 200
    except httpx.HTTPError:
        ok = False
    return Result(ttft, time.perf_counter() - start, tokens, ok)


async def replay(base: str, secret: str, workload: list[Request], args) -> tuple[list, float]:
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    async with httpx.AsyncClient(timeout=600, trust_env=False, limits=limits,
                                 headers={"authorization": f"Bearer {secret}"}) as client:
        t0 = time.perf_counter() + 0.2
        results = await asyncio.gather(*(send(client, f"{base}/v1/chat/completions", r, args, t0)
                                         for r in workload))
        return results, time.perf_counter() - t0


def prefix_counters(ports: list[int]) -> tuple[float, float]:
    hits = queries = 0.0
    for port in ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False).text
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
    return hits, queries


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_strategy(strategy: str, workload: list[Request], args, work: Path,
                 precise: bool = False) -> dict:
    engines, ports = start_engines(args, work)
    gateway = None
    try:
        config = write_config(work, ports, strategy, precise)
        secret = register(config)
        port = free_port()
        gateway = start_process(["-m", "control_plane", "gateway", "--config", str(config),
                                 "--port", str(port)], log_path=work / f"gateway-{strategy}.log")
        wait_http(f"http://127.0.0.1:{port}/readyz", gateway, timeout=120)
        results, makespan = asyncio.run(replay(f"http://127.0.0.1:{port}", secret, workload, args))
        hits, queries = prefix_counters(ports)
    finally:
        if gateway is not None:
            stop_process(gateway)
        for proc in engines:
            stop_process(proc)
    return summarise(strategy, results, makespan, hits, queries)


def summarise(strategy: str, results: list[Result], makespan: float, hits: float,
              queries: float) -> dict:
    done = [r for r in results if r.ok]
    ttfts = [r.ttft for r in done if r.ttft is not None]
    return {"strategy": strategy, "ok": len(done), "errors": len(results) - len(done),
            "ttft_p50": pct(ttfts, 0.5), "ttft_p90": pct(ttfts, 0.9),
            "rps": len(done) / makespan,
            "tok_s": sum(r.completion_tokens for r in done) / makespan,
            "hit_rate": hits / queries if queries else 0.0}


def print_table(rows: list[dict], oracle: float) -> None:
    print(f"\n{'strategy':<26}{'ok':>5}{'err':>5}{'TTFT P50 s':>12}{'TTFT P90 s':>12}"
          f"{'req/s':>8}{'tok/s':>8}{'hit rate':>10}{'vs oracle':>11}")
    for r in rows:
        print(f"{r['strategy']:<26}{r['ok']:>5}{r['errors']:>5}{r['ttft_p50']:>12.3f}"
              f"{r['ttft_p90']:>12.3f}{r['rps']:>8.2f}{r['tok_s']:>8.1f}{r['hit_rate']:>10.3f}"
              f"{r['hit_rate'] / oracle:>11.2f}")
    print(f"{'oracle':<26}{'':>5}{'':>5}{'':>12}{'':>12}{'':>8}{'':>8}{oracle:>10.3f}")
    by = {r["strategy"]: r for r in rows}
    if "prefix_aware" in by and "round_robin" in by:
        pa, rr = by["prefix_aware"], by["round_robin"]
        print(f"\nprefix_aware / round_robin TTFT P90: {pa['ttft_p90'] / rr['ttft_p90']:.3f} "
              f"(goal <= 0.2); prefix_aware hit rate / oracle: {pa['hit_rate'] / oracle:.3f} "
              f"(goal >= 0.9)")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--users", type=int, default=200, help="distinct users per tenant")
    p.add_argument("--skew", type=float, default=0.5, help="Zipf exponent of tenant popularity")
    p.add_argument("--system-tokens", type=int, default=1024)
    p.add_argument("--requests", type=int, default=320)
    p.add_argument("--rate", type=float, default=6.0, help="mean arrivals per second (Poisson)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=256, help="KV blocks per engine (16 tokens)")
    p.add_argument("--prefill-s-per-token", type=float, default=0.0005)
    p.add_argument("--decode-base-s", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)


def measure_oracle(workload: list[Request], args, work: Path) -> float:
    """The oracle hit rate, tokenized by one engine like those of the runs."""
    engines, ports = start_engines(argparse.Namespace(**{**vars(args), "engines": 1}), work)
    try:
        oracle = oracle_hit_rate(f"http://127.0.0.1:{ports[0]}", workload)
    finally:
        stop_process(engines[0])
    print(f"workload: {len(workload)} requests, {args.tenants} tenants, "
          f"~{args.system_tokens}-token system prompts, {args.rate}/s; oracle hit rate "
          f"{oracle:.3f}", flush=True)
    return oracle


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", default="round_robin,least_loaded,p2c,prefix_aware")
    add_workload_args(p)
    args = p.parse_args()
    workload = build_workload(args)
    with tempfile.TemporaryDirectory(prefix="routing-bench-") as tmp:
        work = Path(tmp)
        oracle = measure_oracle(workload, args, work)
        rows = run_each(args.strategies.split(","),
                        lambda strategy: run_strategy(strategy, workload, args, work))
        print_table(rows, oracle)


def run_each(names: list[str], run) -> list[dict]:
    """run(name) for each name, one after another, printing each result as it comes."""
    rows = []
    for name in names:
        started = time.monotonic()
        rows.append(r := run(name))
        print(f"{name}: TTFT P90 {r['ttft_p90']:.3f} s, hit rate {r['hit_rate']:.3f} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
    return rows


if __name__ == "__main__":
    main()

"""Precise (vLLM KV events) against approximate (the gateway's text index) prefix routing, on
two real vLLM CPU engines behind one Inferplane gateway, in one run.

    flock /tmp/inferplane-bench.lock .venv/bin/python bench/vllm_prefix_routing.py \
        [--requests 200] [--rate 1.5] [--tenants 8] [--system-tokens 1024] \
        [--num-gpu-blocks 40] [--runs approximate,precise] [--peers-dir /work/peers-cache]

The engines (bench/_real_engines.start_vllm: prefix caching, KV events on, --max-model-len
2048) start once and serve every run; each holds --num-gpu-blocks KV blocks of 128 tokens, too
few for all the tenants' system prompts, so where a request lands decides whether its prefix
is cached. Per run: POST /reset_prefix_cache on both engines (vLLM's dev-mode endpoint), a fresh
gateway with `prefix_aware` routing — `approximate` without `routing.kv_events`, `precise` with
both engines' publishers configured — and the same Poisson stream of routing_bench's
shared-prefix multi-tenant workload, streamed. Reported per run: TTFT P50/P90, request and token
throughput, and the hit rate the engines counted (deltas of vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total), with ratios against the first run; JSON and a PNG under
bench/results/.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _real_engines as real  # noqa: E402
from bench import routing_bench as rb  # noqa: E402
from bench._common import RESULTS_DIR, write_result  # noqa: E402

# routing_bench's client names the gateway model by this module global
rb.MODEL = real.SERVED
RUNS = "approximate,precise"
READY_TIMEOUT_S = 900
VLLM_BLOCK_TOKENS = 128   # vLLM's block size on CPU


def start_engines(args, work: Path) -> list[real.RealEngine]:
    dirs = Path(args.peers_dir)
    engines = [real.start_vllm(dirs, real.free_port(), work / f"vllm{i}.log", kv_events=True,
                               max_num_seqs=args.max_num_seqs,
                               extra_args=("--num-gpu-blocks-override", str(args.num_gpu_blocks)))
               for i in range(args.engines)]
    try:
        with ThreadPoolExecutor(len(engines)) as pool:
            list(pool.map(lambda e: e.wait_ready(READY_TIMEOUT_S), engines))
    except BaseException:
        for engine in engines:
            engine.stop()
        raise
    return engines


def warm_up(engines: list[real.RealEngine], workload: list[rb.Request]) -> None:
    """One request per engine at the workload's prompt length (first-call compilation)."""
    for engine in engines:
        r = httpx.post(engine.url + "/chat/completions", trust_env=False, timeout=300, json={
            "model": real.SERVED, "messages": workload[0].messages, "max_tokens": 4})
        r.raise_for_status()


def reset_caches(engines: list[real.RealEngine]) -> None:
    for engine in engines:
        r = httpx.post(engine.root + "/reset_prefix_cache", trust_env=False, timeout=30)
        r.raise_for_status()


def counters(engines: list[real.RealEngine]) -> tuple[float, float]:
    return rb.prefix_counters([e.port for e in engines])


def kv_events_yaml(engines: list[real.RealEngine]) -> str:
    sources = "".join(f"    '{e.url}': {{endpoint: '{e.kv_endpoint}', topic: kv, bind: true, "
                      f"replay_endpoint: '{e.replay_endpoint}'}}\n" for e in engines)
    return f"  kv_events:\n{sources}"


def write_config(work: Path, engines: list[real.RealEngine], precise: bool) -> Path:
    name = "precise" if precise else "approximate"
    backends = "".join(f"      - {{url: '{e.url}', engine: vllm, served_model: {real.SERVED}}}\n"
                       for e in engines)
    config = work / f"{name}.yaml"
    config.write_text(
        f"data_dir: {work / ('data-' + name)}\n"
        f"models:\n  - name: {real.SERVED}\n    engine: vllm\n    context_length: 2048\n"
        f"    backends:\n{backends}"
        f"routing:\n  strategy: prefix_aware\n  load_poll_interval_s: 0.5\n"
        f"  prefix_precise: {str(precise).lower()}\n"
        + (kv_events_yaml(engines) if precise else "")
        + "gateway:\n  admission: {queue_size: 100000, max_inflight_per_backend: 100000}\n"
        "  timeouts: {first_token: 300, total: 600}\n")
    return config


def run_one(name: str, engines, workload, args, work: Path) -> dict:
    if name not in ("approximate", "precise"):
        raise SystemExit(f"unknown run {name!r} (approximate, precise)")
    reset_caches(engines)
    config = write_config(work, engines, precise=name == "precise")
    secret = rb.register(config)
    port = rb.free_port()
    gateway = rb.start_process(["-m", "control_plane", "gateway", "--config", str(config),
                                "--port", str(port)], log_path=work / f"gateway-{name}.log")
    try:
        rb.wait_http(f"http://127.0.0.1:{port}/readyz", gateway, timeout=120)
        time.sleep(2)   # a load poll or two: backends healthy, KV event subscriptions up
        hits0, queries0 = counters(engines)
        results, makespan = asyncio.run(rb.replay(f"http://127.0.0.1:{port}", secret,
                                                  workload, args))
        hits1, queries1 = counters(engines)
    finally:
        rb.stop_process(gateway)
    row = rb.summarise(name, results, makespan, hits1 - hits0, queries1 - queries0)
    row["ttfts"] = sorted(r.ttft for r in results if r.ok and r.ttft is not None)
    return row


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_table(rows: list[dict]) -> None:
    base = rows[0]
    print(f"\n{'run':<14}{'ok':>5}{'err':>5}{'TTFT P50 s':>12}{'TTFT P90 s':>12}{'req/s':>8}"
          f"{'tok/s':>8}{'hit rate':>10}   ratios to {base['strategy']} (P50, P90, tok/s, hit)")
    for r in rows:
        print(f"{r['strategy']:<14}{r['ok']:>5}{r['errors']:>5}{r['ttft_p50']:>12.3f}"
              f"{r['ttft_p90']:>12.3f}{r['rps']:>8.2f}{r['tok_s']:>8.1f}{r['hit_rate']:>10.3f}"
              f"   {r['ttft_p50'] / base['ttft_p50']:.3f}, {r['ttft_p90'] / base['ttft_p90']:.3f}"
              f", {r['tok_s'] / base['tok_s']:.3f}, "
              f"{r['hit_rate'] / base['hit_rate'] if base['hit_rate'] else float('nan'):.3f}")


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        ys = [(i + 1) / len(r["ttfts"]) for i in range(len(r["ttfts"]))]
        cdf.plot(r["ttfts"], ys, label=f"{r['strategy']} (hit rate {r['hit_rate']:.2f})")
    cdf.set(xscale="log", xlabel="TTFT (s)", ylabel="fraction of requests", title="TTFT CDF")
    cdf.legend()
    xs = range(len(rows))
    bars.bar([x - 0.2 for x in xs], [r["ttft_p50"] for r in rows], 0.4, label="P50")
    bars.bar([x + 0.2 for x in xs], [r["ttft_p90"] for r in rows], 0.4, label="P90")
    bars.set_xticks(list(xs), [r["strategy"] for r in rows])
    bars.set(ylabel="TTFT (s)", title="2 vLLM CPU engines, prefix_aware routing")
    bars.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    rb.add_workload_args(p)
    p.set_defaults(engines=2, requests=200, rate=1.5)
    p.add_argument("--num-gpu-blocks", type=int, default=40,
                   help="KV blocks per engine (128 tokens each on vLLM CPU)")
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--runs", default=RUNS, help="approximate and/or precise, in order")
    p.add_argument("--peers-dir", default=str(real.peers_dir()))
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    workload = rb.build_workload(args)
    started = time.strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="vllm-prefix-routing-"))   # kept: the engines' logs
    print(f"logs: {work}", flush=True)
    engines = start_engines(args, work)
    try:
        warm_up(engines, workload)
        oracle = rb.oracle_hit_rate(engines[0].root, workload, VLLM_BLOCK_TOKENS)
        loads = [load_average()]
        rows = rb.run_each(args.runs.split(","),
                           lambda name: run_one(name, engines, workload, args, work))
        loads.append(load_average())
    finally:
        for engine in engines:
            engine.stop()
    print(f"workload: {len(workload)} requests, {args.tenants} tenants, ~{args.system_tokens}-"
          f"token system prompts, {args.rate}/s; {args.engines} vLLM engines x "
          f"{args.num_gpu_blocks} blocks; load average before {loads[0]}, after {loads[1]}; "
          f"oracle hit rate {oracle:.3f}")
    print_table(rows)
    # the result first: it creates bench/results/ (absent in a fresh clone) and the plot sits beside it
    path = write_result("vllm_prefix_routing", {
        "args": vars(args), "load_average": loads, "oracle_hit_rate": oracle,
        "prefix_cache_reset": "POST /reset_prefix_cache", "runs": rows},
        str(RESULTS_DIR / f"vllm_prefix_routing-{started}.json"))
    png = plot(rows, path.with_suffix(".png"))
    print(f"\nresult: {path}\nplot:   {png}")


if __name__ == "__main__":
    main()

"""Inferplane's routing beside vllm-router's, in one run, on the shared-prefix multi-tenant
workload of routing_bench (each tenant a long system prompt, each request a short user turn).

    inferplane bench routing_peers [--requests 320] [--rate 6] [--engines 4]
        [--runs inferplane:round_robin,inferplane:prefix_aware,inferplane:prefix_precise,
                vllm-router:cache_aware,vllm-router:round_robin]
        [--peers-dir /work/peers-cache]

Per run: fresh simulated builtin engines (realistic prefill/decode cost, a KV cache small
enough to evict, vLLM's /metrics names), the same Poisson request stream, streamed; TTFT
P50/P90, request and token throughput, and the prefix-cache hit rate the engines counted.
`inferplane:prefix_precise` is prefix_aware routed on the blocks the engines report resident;
`inferplane:prefix_aware` on the gateway's own text index. vllm-router (Rust, PyPI
`vllm-router`, installed by bench/install_peers.sh) runs from --peers-dir; ratios are printed
against vllm-router's cache_aware. Wrap it in `flock /tmp/inferplane-bench.lock`.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import routing_bench as rb  # noqa: E402
from bench._common import write_result  # noqa: E402

RUNS = ("inferplane:round_robin,inferplane:prefix_aware,inferplane:prefix_precise,"
        "vllm-router:cache_aware,vllm-router:round_robin")
BASELINE = "vllm-router:cache_aware"


def run_vllm_router(policy: str, workload, args, work: Path) -> dict:
    binary = Path(args.peers_dir) / "router" / "bin" / "vllm-router"
    if not binary.exists():
        raise SystemExit(f"{binary} missing: bash bench/install_peers.sh {args.peers_dir} router")
    engines, ports = rb.start_engines(args, work)
    router = None
    try:
        port = rb.free_port()
        cmd = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(rb.free_port()),
               "--worker-urls", *[f"http://127.0.0.1:{p}" for p in ports]]
        with open(work / f"vllm-router-{policy}.log", "wb") as log:
            router = rb.subprocess.Popen(cmd, stdout=log, stderr=rb.subprocess.STDOUT,
                                         start_new_session=True)
        rb.wait_http(f"http://127.0.0.1:{port}/health", router, timeout=60)
        results, makespan = asyncio.run(rb.replay(f"http://127.0.0.1:{port}", "none", workload,
                                                  args))
        hits, queries = rb.prefix_counters(ports)
    finally:
        if router is not None:
            rb.stop_process(router)
        for proc in engines:
            rb.stop_process(proc)
    return rb.summarise(f"vllm-router:{policy}", results, makespan, hits, queries)


def run(name: str, workload, args, work: Path) -> dict:
    peer, _, policy = name.partition(":")
    if peer == "vllm-router":
        return run_vllm_router(policy, workload, args, work)
    if policy == "prefix_precise":
        row = rb.run_strategy("prefix_aware", workload, args, work, precise=True)
    else:
        row = rb.run_strategy(policy, workload, args, work)
    return {**row, "strategy": name}


def print_ratios(rows: list[dict]) -> None:
    by = {r["strategy"]: r for r in rows}
    base = by.get(BASELINE)
    if base is None:
        return
    print(f"\nratios against {BASELINE} (TTFT: lower is better; throughput: higher)")
    for r in rows:
        print(f"  {r['strategy']:<26} TTFT P50 {r['ttft_p50'] / base['ttft_p50']:6.3f}  "
              f"TTFT P90 {r['ttft_p90'] / base['ttft_p90']:6.3f}  "
              f"tok/s {r['tok_s'] / base['tok_s']:6.3f}  hit rate {r['hit_rate']:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    rb.add_workload_args(p)
    p.add_argument("--runs", default=RUNS)
    p.add_argument("--peers-dir", default="/work/peers-cache")
    args = p.parse_args()
    workload = rb.build_workload(args)
    with tempfile.TemporaryDirectory(prefix="routing-peers-") as tmp:
        work = Path(tmp)
        oracle = rb.measure_oracle(workload, args, work)
        rows = rb.run_each(args.runs.split(","), lambda name: run(name, workload, args, work))
    rb.print_table(rows, oracle)
    print_ratios(rows)
    path = write_result("routing_peers", {"args": vars(args), "oracle_hit_rate": oracle,
                                          "runs": rows})
    print(f"\nresult: {path}")


if __name__ == "__main__":
    main()

"""Prefix caching: requests sharing a long system prompt, with the cache on vs off.

    python bench/prefix_caching.py [--num-requests 24] [--system-tokens 512] [--rate 0.5]

Every request is <system prompt> + its own ShareGPT-like user text. Two phases, each on
fresh engines over the same weights, prefix caching off then on:
  * latency: requests arrive as a seeded Poisson process at --rate per second; TTFT is
    arrival to first token (P50/P95);
  * throughput: the same requests all at once; output tokens/s until the last finishes
    (requests admitted in the very first step cannot reuse each other's blocks, which are
    published only once computed).
The on/off ratios printed are measured in this run.
"""
from __future__ import annotations

import argparse
import random
import time

import _common as c

from builtin_engine.core.sampling_params import SamplingParams


def arrival_times(n: int, rate: float, seed: int) -> list[float]:
    if rate <= 0:
        return [0.0] * n
    rng, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(rate)
    return times


def run_open_loop(engine, items: list[c.WorkItem], arrivals: list[float]) -> dict:
    """Adds each request once its arrival time has passed, steps until all finish."""
    start = time.perf_counter()
    submitted_at: dict[str, float] = {}
    ttft: dict[str, float] = {}
    produced, nxt = 0, 0
    while nxt < len(items) or engine.has_unfinished():
        now = time.perf_counter() - start
        while nxt < len(items) and arrivals[nxt] <= now:
            w, rid = items[nxt], str(nxt)
            engine.add_request(rid, w.prompt_ids, SamplingParams(
                max_tokens=w.max_tokens, temperature=0.0, ignore_eos=True))
            submitted_at[rid] = arrivals[nxt]
            nxt += 1
        if not engine.has_unfinished():
            time.sleep(min(0.01, max(0.0, arrivals[nxt] - now)))
            continue
        for o in engine.step():
            if o.error:
                raise RuntimeError(f"request {o.request_id} failed: {o.error}")
            if o.new_token_ids and o.request_id not in ttft:
                ttft[o.request_id] = time.perf_counter() - start - submitted_at[o.request_id]
            produced += len(o.new_token_ids)
    elapsed = time.perf_counter() - start
    stats = engine.stats()
    values = list(ttft.values())
    return {"elapsed_s": elapsed, "output_tokens": produced,
            "output_tokens_per_s": produced / elapsed,
            "ttft_p50_s": c.percentile(values, 0.5), "ttft_p95_s": c.percentile(values, 0.95),
            "ttft_mean_s": sum(values) / len(values),
            "prefix_cache_hit_rate": stats["prefix_cache_hit_rate"]}


def fresh_engine(config, loaded):
    engine = c.new_engine(config, loaded)
    c.warm_up(engine, loaded.tokenizer)
    engine.scheduler.kv.pool.reset_prefix_cache()  # the warm-up must not seed any hits
    return engine


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-requests", type=int, default=24)
    p.add_argument("--system-tokens", type=int, default=512)
    p.add_argument("--user-median", type=int, default=48)
    p.add_argument("--output-median", type=int, default=24)
    p.add_argument("--max-output", type=int, default=64)
    p.add_argument("--rate", type=float, default=0.5, help="latency phase arrivals per second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--num-blocks", type=int, default=2048)
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    c.set_threads(args.threads)
    loaded, _ = c.load_builtin(c.engine_config(num_blocks=1))
    tok = loaded.tokenizer
    system = c.text_tokens(tok, random.Random(args.seed + 7), args.system_tokens)
    items = c.sharegpt_like(tok, args.num_requests, args.seed, args.user_median,
                            args.output_median, (8, 256), (4, args.max_output), prefix=system)
    arrivals = arrival_times(len(items), args.rate, args.seed)
    result = {"workload": c.describe(items), "system_tokens": args.system_tokens,
              "rate": args.rate, "threads": args.threads}
    burst = [0.0] * len(items)
    for label, enabled in (("cache_off", False), ("cache_on", True)):
        config = c.engine_config(enable_prefix_caching=enabled, num_blocks=args.num_blocks)
        result[label] = {phase: run_open_loop(fresh_engine(config, loaded), items, times)
                         for phase, times in (("latency", arrivals), ("throughput", burst))}
        c.log(f"{label}: {result[label]}")
    off, on = result["cache_off"], result["cache_on"]
    result["ttft_p50_speedup"] = off["latency"]["ttft_p50_s"] / on["latency"]["ttft_p50_s"]
    result["throughput_ratio"] = (on["throughput"]["output_tokens_per_s"]
                                  / off["throughput"]["output_tokens_per_s"])
    path = c.write_result("prefix_caching", result, args.output)
    report(result, path)
    return result


def report(result: dict, path) -> None:
    w = result["workload"]
    print(f"command: {c.command_line()}")
    print(f"workload: {w['num_requests']} requests sharing a {result['system_tokens']}-token "
          f"system prompt, {w['prompt_tokens']} prompt / {w['output_tokens']} output tokens, "
          f"rate={result['rate']}/s, threads={result['threads']}")
    for label in ("cache_off", "cache_on"):
        lat, thr = result[label]["latency"], result[label]["throughput"]
        print(f"{label:9}: TTFT p50 {lat['ttft_p50_s']:.3f}s p95 {lat['ttft_p95_s']:.3f}s "
              f"(hit rate {lat['prefix_cache_hit_rate']:.0%}); all at once "
              f"{thr['output_tokens_per_s']:.1f} output tok/s ({thr['elapsed_s']:.1f}s, hit "
              f"rate {thr['prefix_cache_hit_rate']:.0%})")
    print(f"cache on vs off: TTFT p50 {result['ttft_p50_speedup']:.1f}x lower, "
          f"throughput {result['throughput_ratio']:.2f}x")
    print(f"result file: {path}")


if __name__ == "__main__":
    main()

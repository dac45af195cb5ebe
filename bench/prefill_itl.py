"""Decode inter-token latency while long prompts arrive: chunked prefill must not stall decodes.

    python bench/prefill_itl.py [--streams 4] [--long-prompts 2] [--long-tokens 4096]
                                [--decode-tokens 48] [--budgets 64,256,0] [--dtype auto]

For each --budgets value (the scheduler's decode_prefill_budget: prefill tokens a step may
take while some request decodes; 0 = the whole max_num_batched_tokens) the same run is made
twice over the same weights: `alone`, --streams greedy decode streams by themselves, and
`with_prefill`, the same streams while --long-prompts prompts of --long-tokens tokens arrive
once the streams are decoding (SmolLM2-135M's context is 8192 tokens). The inter-token
latency of every stream token is recorded; the P99 with prefills over the P99 alone is the
ratio (goal <= 3x), measured in this run so a shared host shifts both sides alike.
"""
from __future__ import annotations

import argparse
import random
import time

import _common as c

GOAL = 3.0


def stream_items(tok, n: int, tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [c.text_tokens(tok, rng, tokens) for _ in range(n)]


def run(engine, streams: list[list[int]], long_prompts: list[list[int]], decode_tokens: int):
    """Streams decode decode_tokens each; long prompts are added after every stream has its
    first token. Returns (stream ITLs, ITLs while a long prompt was prefilling, long TTFTs)."""
    from builtin_engine.core.sampling_params import SamplingParams
    stream_params = SamplingParams(max_tokens=decode_tokens, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(streams):
        engine.add_request(f"s{i}", p, stream_params)
    last: dict[str, float] = {}
    itl, itl_during, ttft, added, pending = [], [], [], None, set()
    while engine.has_unfinished():
        outputs = engine.step()
        now = time.perf_counter()
        for o in outputs:
            if o.error:
                raise RuntimeError(o.error)
            if not o.new_token_ids:
                continue
            if o.request_id.startswith("L"):
                ttft.append(now - added)
                pending.discard(o.request_id)
                continue
            if o.request_id in last:
                gap = now - last[o.request_id]
                itl.append(gap)
                if pending:
                    itl_during.append(gap)
            last[o.request_id] = now
        if added is None and long_prompts and len(last) == len(streams):
            added = time.perf_counter()
            for j, p in enumerate(long_prompts):
                engine.add_request(f"L{j}", p, SamplingParams(max_tokens=1, temperature=0.0))
                pending.add(f"L{j}")
    return itl, itl_during, ttft


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": c.percentile(values, 0.5),
            "p90_s": c.percentile(values, 0.9), "p99_s": c.percentile(values, 0.99),
            "max_s": max(values) if values else float("nan")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--long-prompts", type=int, default=2)
    p.add_argument("--long-tokens", type=int, default=4096)
    p.add_argument("--decode-tokens", type=int, default=48)
    p.add_argument("--budgets", default="64,256,0",
                   help="decode_prefill_budget values to compare")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    c.set_threads(args.threads)
    base = dict(dtype=args.dtype, num_blocks=1024, enable_prefix_caching=False,
                max_num_batched_tokens=args.max_num_batched_tokens)
    loaded, _ = c.load_builtin(c.engine_config(**base))
    tok = loaded.tokenizer
    rng = random.Random(args.seed + 1)
    streams = stream_items(tok, args.streams, 64, args.seed)
    long_prompts = [c.text_tokens(tok, rng, args.long_tokens) for _ in range(args.long_prompts)]
    result = {"threads": args.threads, "streams": args.streams,
              "long_prompts": args.long_prompts, "long_tokens": args.long_tokens,
              "context_length": loaded.context_length, "runs": {}}
    for budget in (int(b) for b in args.budgets.split(",")):
        config = c.engine_config(**base, decode_prefill_budget=budget)
        result["dtype"] = config.dtype
        engine = c.new_engine(config, loaded)
        c.warm_up(engine, tok)
        alone, _, _ = run(engine, streams, [], args.decode_tokens)
        mixed, during, ttft = run(engine, streams, long_prompts, args.decode_tokens)
        a, m, d = summary(alone), summary(mixed), summary(during)
        result["runs"][str(budget)] = {
            "alone": a, "with_prefill": m, "while_prefilling": d,
            "long_ttft_s": ttft, "p99_ratio": m["p99_s"] / a["p99_s"]}
        c.log(f"budget {budget}: ITL P99 alone {a['p99_s'] * 1e3:.0f} ms, with prefills "
              f"{m['p99_s'] * 1e3:.0f} ms ({m['p99_s'] / a['p99_s']:.2f}x)")
    path = c.write_result("prefill_itl", result, args.output)
    report(result, path)
    return result


def report(result: dict, path) -> None:
    print(f"command: {c.command_line()}")
    print(f"{result['streams']} decode streams; {result['long_prompts']} prompts of "
          f"{result['long_tokens']} tokens arrive while they decode (context "
          f"{result['context_length']}), {result['dtype']}, threads={result['threads']}")
    print(f"{'prefill budget':>15} {'ITL p50 alone':>14} {'p99 alone':>10} {'p50 w/ long':>12} "
          f"{'p99 w/ long':>12} {'ratio':>6} {'long TTFT':>10}")
    for budget, r in result["runs"].items():
        a, m = r["alone"], r["with_prefill"]
        name = "unbounded" if budget == "0" else budget
        ttft = max(r["long_ttft_s"]) if r["long_ttft_s"] else float("nan")
        print(f"{name:>15} {a['p50_s'] * 1e3:12.0f}ms {a['p99_s'] * 1e3:8.0f}ms "
              f"{m['p50_s'] * 1e3:10.0f}ms {m['p99_s'] * 1e3:10.0f}ms {r['p99_ratio']:5.2f}x "
              f"{ttft:9.1f}s  (goal <= {GOAL:g}x: {'met' if r['p99_ratio'] <= GOAL else 'NOT met'})")
    print(f"result file: {path}")


if __name__ == "__main__":
    main()

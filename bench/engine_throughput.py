"""Offline throughput: the builtin engine vs HF transformers on the same requests.

    python bench/engine_throughput.py [--num-requests 64] [--hf-single-subset 8]
                                      [--hf-batch-size 16] [--threads 2] [--seed 0]

All requests are submitted at once with ShareGPT-like lengths (greedy, ignore_eos, so every
side generates exactly the requested number of tokens). Baselines:
  * HF per-request: model.generate on each request alone. When --hf-single-subset is smaller
    than the workload, a seeded subset is timed and the whole is extrapolated at the subset's
    output tokens/s (printed as such).
  * HF static batching: left-padded batches of --hf-batch-size in submission order, each run
    until its longest request is done; only the requested tokens count as output.
Output tokens/s and the ratios printed are all measured in this run, from wall time; the
ratios from process CPU time are printed too, as the host may be running other work.
"""
from __future__ import annotations

import argparse
import random
import time

import _common as c

GOAL_VS_PER_REQUEST = 10.0
GOAL_VS_STATIC = 2.0


def hf_single(model, items: list[c.WorkItem], eos: int) -> tuple[float, float, list[list[int]]]:
    import torch
    elapsed, cpu, outputs = 0.0, 0.0, []
    for w in items:
        ids = torch.tensor([w.prompt_ids])
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=w.max_tokens, min_new_tokens=w.max_tokens,
                                 pad_token_id=eos)
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        outputs.append(out[0, ids.shape[1]:].tolist())
    return elapsed, cpu, outputs


def hf_static(model, items: list[c.WorkItem], batch_size: int,
              eos: int) -> tuple[float, float, int]:
    import torch
    start, cpu_start, useful = time.perf_counter(), time.process_time(), 0
    for b in range(0, len(items), batch_size):
        batch = items[b:b + batch_size]
        width = max(len(w.prompt_ids) for w in batch)
        ids = torch.full((len(batch), width), eos, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, w in enumerate(batch):  # left padding: every row's last token lines up
            ids[i, width - len(w.prompt_ids):] = torch.tensor(w.prompt_ids)
            mask[i, width - len(w.prompt_ids):] = 1
        longest = max(w.max_tokens for w in batch)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=longest, min_new_tokens=longest,
                                 pad_token_id=eos)
        if out.shape[1] - width != longest:
            raise RuntimeError("HF static batch stopped early")
        useful += sum(w.max_tokens for w in batch)
    return time.perf_counter() - start, time.process_time() - cpu_start, useful


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-median", type=int, default=100)
    p.add_argument("--output-median", type=int, default=100)
    p.add_argument("--max-prompt", type=int, default=512)
    p.add_argument("--max-output", type=int, default=256)
    p.add_argument("--hf-single-subset", type=int, default=8,
                   help="requests timed for HF per-request (0 = skip, >= n = all)")
    p.add_argument("--hf-batch-size", type=int, default=16, help="0 skips HF static batching")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--num-blocks", type=int, default=2048)
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    c.set_threads(args.threads)
    config = c.engine_config(max_num_seqs=args.max_num_seqs, num_blocks=args.num_blocks,
                             max_num_batched_tokens=args.max_num_batched_tokens)
    loaded, _ = c.load_builtin(config)
    tok = loaded.tokenizer
    items = c.sharegpt_like(tok, args.num_requests, args.seed, args.prompt_median,
                            args.output_median, (16, args.max_prompt), (8, args.max_output))
    shape = c.describe(items)
    c.log(f"workload: {shape}")

    engine = c.new_engine(config, loaded)
    c.warm_up(engine, tok)
    run = c.run_engine(engine, items)
    builtin_tps = run.output_tokens / run.elapsed_s
    c.log(f"builtin: {run.output_tokens} tokens in {run.elapsed_s:.1f}s over {run.steps} steps")
    result = {"workload": shape, "threads": args.threads, "builtin": {
        "elapsed_s": run.elapsed_s, "output_tokens": run.output_tokens,
        "output_tokens_per_s": builtin_tps, "steps": run.steps, "cpu_s": run.cpu_s,
        "ttft_p50_s": c.percentile(run.ttft_s, 0.5)}}

    model = c.load_hf() if args.hf_single_subset or args.hf_batch_size else None
    if args.hf_single_subset:
        picked = sorted(random.Random(args.seed + 1).sample(
            range(len(items)), min(args.hf_single_subset, len(items))))
        subset = [items[i] for i in picked]
        hf_single(model, [c.WorkItem(subset[0].prompt_ids, 2)], tok.eos_token_id)  # warm-up
        elapsed, cpu, hf_outputs = hf_single(model, subset, tok.eos_token_id)
        tokens = sum(len(o) for o in hf_outputs)
        tps = tokens / elapsed
        # Same greedy decoding on both sides; fp32 rounding may still flip a late near-tie.
        same = sum(run.outputs[str(i)] == o for i, o in zip(picked, hf_outputs))
        result["hf_per_request"] = {
            "timed_requests": len(subset), "timed_s": elapsed, "timed_tokens": tokens,
            "output_tokens_per_s": tps, "extrapolated": len(subset) < len(items),
            "estimated_total_s": shape["output_tokens"] / tps,
            "speedup": builtin_tps / tps, "cpu_s": cpu,
            "cpu_time_speedup": (run.output_tokens / run.cpu_s) / (tokens / cpu),
            "identical_outputs": same}
        c.log(f"hf per-request: {tokens} tokens in {elapsed:.1f}s ({len(subset)} requests)")
    if args.hf_batch_size:
        elapsed, cpu, tokens = hf_static(model, items, args.hf_batch_size, tok.eos_token_id)
        result["hf_static"] = {"batch_size": args.hf_batch_size, "elapsed_s": elapsed,
                               "output_tokens": tokens, "output_tokens_per_s": tokens / elapsed,
                               "speedup": builtin_tps / (tokens / elapsed), "cpu_s": cpu,
                               "cpu_time_speedup": cpu / run.cpu_s * run.output_tokens / tokens}
        c.log(f"hf static: {tokens} tokens in {elapsed:.1f}s")
    path = c.write_result("engine_throughput", result, args.output)
    report(result, path)
    return result


def report(result: dict, path) -> None:
    print(f"command: {c.command_line()}")
    w = result["workload"]
    print(f"workload: {w['num_requests']} requests, {w['prompt_tokens']} prompt / "
          f"{w['output_tokens']} output tokens (median prompt {w['prompt_median']}, "
          f"median output {w['output_median']}), threads={result['threads']}")
    b = result["builtin"]
    print(f"builtin engine        : {b['output_tokens_per_s']:8.1f} output tok/s "
          f"({b['elapsed_s']:.1f}s, {b['steps']} steps)")
    single = result.get("hf_per_request")
    if single:
        how = (f"timed {single['timed_requests']} requests, whole workload extrapolated to "
               f"{single['estimated_total_s']:.0f}s" if single["extrapolated"] else "all requests")
        ratio = single["speedup"]
        print(f"HF per-request        : {single['output_tokens_per_s']:8.1f} output tok/s ({how})"
              f"  -> builtin {ratio:.1f}x{_goal(ratio, GOAL_VS_PER_REQUEST)}; by CPU time "
              f"{single['cpu_time_speedup']:.1f}x")
        print(f"  greedy outputs identical to the builtin engine's: "
              f"{single['identical_outputs']}/{single['timed_requests']}")
    static = result.get("hf_static")
    if static:
        print(f"HF static batch of {static['batch_size']:<3}: {static['output_tokens_per_s']:8.1f}"
              f" output tok/s ({static['elapsed_s']:.1f}s)  -> builtin {static['speedup']:.1f}x"
              f"{_goal(static['speedup'], GOAL_VS_STATIC)}; by CPU time "
              f"{static['cpu_time_speedup']:.1f}x")
    print(f"result file: {path}")


def _goal(ratio: float, goal: float) -> str:
    return f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"


if __name__ == "__main__":
    main()

"""Where a batched decode step spends its time: torch.profiler over real model steps.

    python bench/decode_profile.py [--batch 64] [--steps 8] [--context-min 16]
                                   [--context-max 560] [--dtype float32] [--threads 2]
                                   [--prefill-chunk N] [--no-pack-weights]
                                   [--compile | --no-compile] [--compare N]
                                   [--quantization int8] [--timed N]

Builds the model runner on the real SmolLM2 weights, gives `--batch` requests contexts spread
evenly over [context-min, context-max] (the KV cache holds random values: attention costs the
same whatever it reads), and profiles `--steps` decode steps after two warm-up steps. Ops are
grouped into the categories of the table in docs/bench/README.md; the share of each is of the
summed self CPU time of all ops, and the step time is wall time per step. `--timed N` then
times N steps without the profiler and prints their median (the figure to compare runs by:
the profiler's own cost per op event is in the profiled wall time).
"""
from __future__ import annotations

import argparse
import time

import _common as c

# First matching pattern wins: an aten op name -> the category it is counted in.
CATEGORIES = (
    ("matmul (projections, LM head)", ("aten::addmm", "aten::mm", "aten::linear", "aten::matmul",
                                       "aten::bmm", "mkldnn", "aten::_weight_int8")),
    ("attention (C++ decode kernel)", ("cpu_decode_attention",)),
    ("attention (C++ prompt kernel)", ("cpu_prefill_attention",)),
    # The op event's own time, around the ATen call it makes: the custom-op dispatch
    # (a Python custom op's wrapper, or the C++ op's table look-up).
    ("custom-op dispatch (store_kv, packed_linear)", ("inferplane::",)),
    ("attention (SDPA)", ("scaled_dot_product", "flash_attention", "aten::_softmax",
                          "aten::baddbmm")),
    ("KV gather (paged reads)", ("aten::index", "aten::gather")),
    ("KV store (scatter)", ("aten::index_copy", "aten::index_put")),
    ("compiled kernels (inductor)", ("inductor", "compiled", "torch-compiled", "cpp_fused",
                                     "graph_")),
    ("norm / rotary / activation", ("aten::mul", "aten::add", "aten::rsqrt", "aten::pow",
                                    "aten::mean", "aten::silu", "aten::cat", "aten::sub",
                                    "aten::neg", "aten::sigmoid", "aten::embedding")),
    ("copies / casts / layout", ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone",
                                 "aten::contiguous", "aten::fill_", "aten::zero_")),
    ("sampling", ("aten::argmax", "aten::max", "aten::sort", "aten::topk", "aten::multinomial",
                  "aten::log_softmax", "aten::softmax")),
)


def categorise(name: str) -> str:
    low = name.lower()
    for category, patterns in CATEGORIES:
        if any(p.lower() in low for p in patterns):
            return category
    return "other (host glue, small ops)"


def build(args):
    import torch

    from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
    from builtin_engine.core.sampling_params import SamplingParams

    block = 16
    longest = args.context_max + args.steps + args.timed + 2 * args.compare + 4  # every step's token
    blocks_per = -(-longest // block)
    chunk_blocks = -(-args.prefill_chunk // block)
    overrides = dict(dtype=args.dtype, num_blocks=args.batch * blocks_per + chunk_blocks + 1,
                     block_size=block, max_num_seqs=max(64, args.batch),
                     quantization=args.quantization)
    if args.pack_weights is not None:
        overrides["pack_weights"] = args.pack_weights
    if args.compile is not None:
        overrides["compile"] = args.compile
    config = c.engine_config(**overrides)
    loaded, runner = c.load_builtin(config)
    for k, v in runner.kv_caches:
        k.normal_()
        v.normal_()
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    span = max(1, args.batch - 1)
    contexts = [args.context_min + (args.context_max - args.context_min) * i // span
                for i in range(args.batch)]
    state = [{"pos": ctx, "blocks": list(range(1 + i * blocks_per, 1 + (i + 1) * blocks_per))}
             for i, ctx in enumerate(contexts)]
    gen = torch.Generator().manual_seed(0)
    vocab = loaded.llama_config.vocab_size

    def one_step():
        reqs = []
        for i, s in enumerate(state):
            tok = int(torch.randint(vocab, (1,), generator=gen))
            reqs.append(ScheduledRequest(f"r{i}", [tok], s["pos"], s["blocks"], True, params,
                                         num_output_tokens=1))
            s["pos"] += 1
        if args.prefill_chunk:  # a prompt's first chunk beside the decode rows (a mixed step)
            first = 1 + args.batch * blocks_per
            toks = torch.randint(vocab, (args.prefill_chunk,), generator=gen).tolist()
            reqs.append(ScheduledRequest("prompt", toks, 0, list(range(first, first + chunk_blocks)),
                                         False, params, num_output_tokens=0))
        runner.execute(SchedulerOutput(scheduled=reqs))

    return runner, one_step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--context-min", type=int, default=16)
    p.add_argument("--context-max", type=int, default=560)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--quantization", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prefill-chunk", type=int, default=0,
                   help="each step also computes a prompt chunk of this many tokens")
    p.add_argument("--pack-weights", default=None, action=argparse.BooleanOptionalAction)
    p.add_argument("--compile", dest="compile", action="store_true", default=None)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--timed", type=int, default=0,
                   help="then time this many steps unprofiled and print their median")
    p.add_argument("--compare", type=int, default=0,
                   help="with --compile: then time this many eager and compiled steps, "
                        "interleaved")
    args = p.parse_args(argv)
    c.set_threads(args.threads)
    import torch
    from torch.profiler import ProfilerActivity, profile

    runner, one_step = build(args)
    c.log(f"runner: {runner.describe()}")
    for _ in range(2):
        one_step()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            one_step()
    wall = (time.perf_counter() - start) / args.steps
    totals: dict[str, float] = {}
    for evt in prof.key_averages():
        totals[categorise(evt.key)] = totals.get(categorise(evt.key), 0.0) + evt.self_cpu_time_total
    whole = sum(totals.values()) or 1.0
    mixed = f" + a {args.prefill_chunk}-token prompt chunk" if args.prefill_chunk else ""
    print(f"\ndecode step, batch {args.batch}{mixed}, contexts {args.context_min}-{args.context_max}, "
          f"{runner.describe()}")
    print(f"wall time per step (profiled): {wall * 1000:.1f} ms "
          f"({args.batch / wall:.1f} tok/s)\n")
    print("| where | share of op time | ms per step |\n|---|---|---|")
    for cat, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {cat} | {100 * us / whole:.1f}% | {us / 1000 / args.steps:.1f} |")
    print("\ntop ops by self CPU time:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    if args.timed:
        timed(one_step, args)
    if runner.compiled is not None and args.compare:
        compare(runner, one_step, args)
    del torch
    return 0


def timed(one_step, args) -> None:
    """Median wall time of `--timed` steps, no profiler attached."""
    import statistics
    times = []
    for _ in range(args.timed):
        start = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - start)
    print(f"\nunprofiled, {args.timed} steps: median {statistics.median(times) * 1000:.2f} ms/step "
          f"(min {min(times) * 1000:.2f})")


def compare(runner, one_step, args) -> None:
    """Eager and compiled steps interleaved (the host drifts; alternation cancels it)."""
    compiled, times = runner.compiled, {"eager": 0.0, "compiled": 0.0}
    for _ in range(args.compare):
        for name, path in (("eager", None), ("compiled", compiled)):
            runner.compiled = path
            start = time.perf_counter()
            one_step()
            times[name] += time.perf_counter() - start
    runner.compiled = compiled
    per = {k: v / args.compare for k, v in times.items()}
    print(f"\ninterleaved, {args.compare} steps each: eager {per['eager'] * 1000:.0f} ms/step, "
          f"compiled {per['compiled'] * 1000:.0f} ms/step: "
          f"compiled {per['eager'] / per['compiled']:.2f}x eager")


if __name__ == "__main__":
    raise SystemExit(main())

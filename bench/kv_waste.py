"""KV cache waste: allocated-but-unused token slots, at the step where allocation peaks.

    python bench/kv_waste.py [--num-requests 64] [--block-sizes 16,8] [--executor sim|real]

Runs the ShareGPT-like throughput workload (all requests at once, ignore_eos) and after every
step compares the slots held by requests (allocated blocks x block size) with the slots that
hold a computed token's K/V. A block shared by several requests counts once, with the fill of
its fullest user. Waste is a property of the scheduler and the KV cache manager: with
ignore_eos the model never changes what is allocated, so the default `--executor sim` runs
them under the engine's SimulatedExecutor (block tables checked, no compute; seconds).
`--executor real` runs the SmolLM2 model instead (minutes). Inside a block the waste is the
unfilled tail of each request's last block, about (block_size - 1) / 2 slots per request.
"""
from __future__ import annotations

import argparse

import _common as c

GOAL = 0.04


class WasteProbe:
    """Called after each engine step; keeps the step with the most allocated slots."""

    def __init__(self) -> None:
        self.peak: dict = {"allocated_slots": 0}
        self.samples: list[float] = []

    def __call__(self, engine) -> None:
        kv = engine.scheduler.kv
        fill: dict[int, int] = {}
        for rid, blocks in kv.req_blocks.items():
            req = engine.scheduler.requests.get(rid)
            computed = req.num_computed_tokens if req is not None else 0
            for i, block in enumerate(blocks):
                used = max(0, min(kv.block_size, computed - i * kv.block_size))
                fill[block.block_id] = max(fill.get(block.block_id, 0), used)
        allocated = len(fill) * kv.block_size
        if not allocated:
            return
        used = sum(fill.values())
        waste = (allocated - used) / allocated
        self.samples.append(waste)
        if allocated > self.peak["allocated_slots"]:
            self.peak = {"allocated_slots": allocated, "used_slots": used,
                         "unused_slots": allocated - used, "waste": waste,
                         "num_requests_holding_blocks": len(kv.req_blocks)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-prompt", type=int, default=512)
    p.add_argument("--max-output", type=int, default=256)
    p.add_argument("--block-sizes", default="16,8", help="comma-separated; one run each")
    p.add_argument("--num-blocks", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--executor", choices=["sim", "real"], default="sim")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def build_engine(args, block_size: int, loaded=None):
    config = c.engine_config(block_size=block_size, num_blocks=args.num_blocks,
                             max_num_seqs=args.max_num_seqs, simulate=args.executor == "sim",
                             sim_prefill_s_per_token=0.0, sim_decode_base_s=0.0,
                             sim_decode_s_per_seq=0.0, sim_decode_s_per_kv_token=0.0)
    if args.executor == "sim":
        from builtin_engine.core.llm_engine import LLMEngine
        from builtin_engine.core.simulator import SimulatedExecutor
        from builtin_engine.loader.tokenizer import load_tokenizer
        return LLMEngine(config, SimulatedExecutor(config), load_tokenizer(config.model))
    return c.new_engine(config, loaded)


def measure(engine, items: list[c.WorkItem], block_size: int) -> dict:
    probe = WasteProbe()
    run = c.run_engine(engine, items, on_step=probe)
    return {"block_size": block_size, "peak": probe.peak,
            "mean_waste": sum(probe.samples) / len(probe.samples),
            "meets_goal": probe.peak["waste"] < GOAL, "steps": run.steps,
            "elapsed_s": run.elapsed_s}


def main(argv=None) -> dict:
    args = parse_args(argv)
    c.set_threads(args.threads)
    block_sizes = [int(b) for b in args.block_sizes.split(",")]
    loaded = None
    if args.executor == "real":
        loaded, _ = c.load_builtin(c.engine_config(num_blocks=1))
        tok = loaded.tokenizer
    else:
        from builtin_engine.loader.tokenizer import load_tokenizer
        tok = load_tokenizer(c.MODEL)
    items = c.sharegpt_like(tok, args.num_requests, args.seed, prompt_range=(16, args.max_prompt),
                            output_range=(8, args.max_output))
    runs = [measure(build_engine(args, bs, loaded), items, bs) for bs in block_sizes]
    result = {"workload": c.describe(items), "executor": args.executor, "goal": GOAL,
              "runs": runs}
    path = c.write_result("kv_waste", result, args.output)
    print(f"command: {c.command_line()}")
    print(f"workload: {args.num_requests} requests, {result['workload']['prompt_tokens']} "
          f"prompt / {result['workload']['output_tokens']} output tokens, "
          f"executor={args.executor}")
    for r in runs:
        peak = r["peak"]
        print(f"block_size={r['block_size']:<3}: peak {peak['allocated_slots']} slots in "
              f"{peak['num_requests_holding_blocks']} requests, {peak['unused_slots']} unused "
              f"-> waste {peak['waste']:.2%} (goal < {GOAL:.0%}: "
              f"{'met' if r['meets_goal'] else 'NOT met'}); mean over {r['steps']} steps "
              f"{r['mean_waste']:.2%}")
    print(f"result file: {path}")
    return result


if __name__ == "__main__":
    main()

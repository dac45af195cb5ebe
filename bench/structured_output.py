"""Structured output: batch throughput with a share of grammar-constrained requests mixed in.

    inferplane bench structured_output [--num-requests 16] [--max-tokens 64]
                                       [--shares 0,0.25,0.5,1] [--plot docs/bench/structured_output.png]

Every phase runs the same ShareGPT-like prompts all at once on a fresh engine over the same
weights (greedy). In a phase with share s, that fraction of the requests carries a
json_schema grammar (xgrammar masks, filled on a thread pool during the forward pass); the
schemas hold unbounded arrays, and every row ignores eos, so all phases produce the same tokens. Output tokens/s of each phase is printed as a ratio to
the all-unconstrained phase measured in this run (share 0), with the time the sampler spent
waiting for masks that were not ready yet.
"""
from __future__ import annotations

import argparse
import time

import _common as c

from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.structured import matcher_pool
from builtin_engine.structured.grammar import StructuredRequest, compiler_for

SCHEMAS = [
    {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
        "score": {"type": "integer", "minimum": 0, "maximum": 100}},
     "required": ["title", "tags", "score"], "additionalProperties": False},
    {"type": "object", "properties": {
        "people": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
            "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"]}}},
     "required": ["people"]},
]


class MaskWait:
    """Wall time the sampler spent blocked on GrammarState.bitmask() (mask not ready)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        original = matcher_pool.GrammarState.bitmask

        def timed(state):
            start = time.perf_counter()
            try:
                return original(state)
            finally:
                self.seconds += time.perf_counter() - start
        matcher_pool.GrammarState.bitmask = timed


def run_phase(engine, items, share: float, compiled: list, vocab: int, wait: MaskWait) -> dict:
    n = round(share * len(items))
    constrained = {j * len(items) // n for j in range(n)} if n else set()  # spread out
    for i, w in enumerate(items):
        # every row runs to max_tokens, so phases compare the same work (a finished grammar
        # only allows eos, which ignore_eos keeps sampling)
        params = SamplingParams(max_tokens=w.max_tokens, temperature=0.0, ignore_eos=True)
        if i in constrained:
            params.grammar = matcher_pool.GrammarState(compiled[i % len(compiled)], vocab)
        engine.add_request(str(i), w.prompt_ids, params)
    wait.seconds = 0.0
    start, produced, steps = time.perf_counter(), 0, 0
    while engine.has_unfinished():
        for o in engine.step():
            if o.error:
                raise RuntimeError(f"request {o.request_id} failed: {o.error}")
            produced += len(o.new_token_ids)
        steps += 1
        if steps % 25 == 0:
            print(f"  share {share:.2f}: step {steps}, {produced} tokens", flush=True)
    elapsed = time.perf_counter() - start
    return {"share": share, "num_constrained": len(constrained), "elapsed_s": elapsed,
            "output_tokens": produced, "tokens_per_s": produced / elapsed, "steps": steps,
            "mask_wait_s": wait.seconds}


def plot(phases: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    shares = [f"{p['share']:.0%}" for p in phases]
    ax.bar(shares, [p["ratio"] for p in phases], color="#4c72b0")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    for x, p in enumerate(phases):
        ax.text(x, p["ratio"], f"{p['ratio']:.2f}", ha="center", va="bottom")
    ax.set_xlabel("share of json_schema-constrained requests in the batch")
    ax.set_ylabel("output tokens/s vs all unconstrained")
    ax.set_title("Structured output in a mixed batch (SmolLM2-135M, CPU)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--shares", default="0,0.25,0.5,1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=str(c.ROOT / "docs" / "bench" / "structured_output.png"))
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    c.set_threads(args.threads)
    config = c.engine_config(num_blocks=512, compile=False)
    print("loading the model ...", flush=True)
    loaded, _ = c.load_builtin(config)
    tokenizer = loaded.tokenizer
    compiler = compiler_for(tokenizer)
    compiled = [compiler.compile(StructuredRequest(response_format={
        "type": "json_schema", "json_schema": {"name": f"s{i}", "schema": s}}))
        for i, s in enumerate(SCHEMAS)]
    items = c.sharegpt_like(tokenizer, args.num_requests, args.seed, prompt_median=64,
                            output_range=(args.max_tokens, args.max_tokens))
    wait = MaskWait()
    c.warm_up(c.new_engine(config, loaded), tokenizer)
    phases = []
    for share in (float(s) for s in args.shares.split(",")):
        print(f"phase: {share:.0%} constrained", flush=True)
        phases.append(run_phase(c.new_engine(config, loaded), items, share, compiled,
                                compiler.vocab_size, wait))
    base = next(p for p in phases if p["share"] == 0)["tokens_per_s"]
    for p in phases:
        p["ratio"] = p["tokens_per_s"] / base
    result = {"workload": c.describe(items), "phases": phases}
    path = c.write_result("structured_output", result, args.output)
    plot(phases, args.plot)
    print(f"command: {c.command_line()}")
    for p in phases:
        print(f"{p['share']:5.0%} constrained ({p['num_constrained']:2d}): "
              f"{p['tokens_per_s']:7.1f} tok/s, ratio {p['ratio']:.2f} to unconstrained, "
              f"{p['steps']} steps, mask wait {p['mask_wait_s'] * 1e3:.1f} ms")
    print(f"result file: {path}\nplot: {args.plot}")


if __name__ == "__main__":
    main()

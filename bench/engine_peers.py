"""The builtin engine beside its peers on this CPU: one workload, one run, one table + plot.

    inferplane bench engine_peers [--num-requests 64] [--dtypes float32,bfloat16]
                                  [--hf-subset 4] [--port-base 19750] [--plot-copy PATH]

Workload (seeded): --num-requests completions sent at once, prompts of 16-400 words of
English prose, 32-160 output tokens each, greedy, ignore_eos, streamed. Every HTTP engine is
started as its own server process, driven by the same asyncio client (time to first token
and inter-token latency from the stream chunks, output tokens from the usage chunk) and
stopped before the next starts:
  * builtin, once per --dtypes value (`python -m builtin_engine serve --dtype D`);
  * vLLM CPU, float32 and bfloat16, when a vLLM install is found (--vllm-python, or
    $INFERPLANE_VLLM_PYTHON, or /work/peers-cache/vllm/bin/python) with --hf-dir;
  * llama.cpp `llama-server -np N`, when a binary is found (--llama-server, or
    $INFERPLANE_LLAMA_SERVER, or /work/peers-cache/llama-server, or on PATH).
HF transformers generates --hf-subset requests one at a time in this process; its rate is
extrapolated to the workload (said so in the table). Peers without an install are listed as
skipped. The host may be shared: every figure is from this run, and the ratios are what
compare. The plot goes to bench/results/ (and to --plot-copy).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import _engine_peers_client as client

PEERS_CACHE = Path("/work/peers-cache")


def workload(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        start = rng.randrange(len(c.WORDS))
        words = [c.WORDS[(start + i) % len(c.WORDS)] for i in range(rng.randint(16, 400))]
        items.append({"prompt": " ".join(words), "max_tokens": rng.randint(32, 160)})
    return items


# ---- engines -----------------------------------------------------------------------------
def builtin_command(dtype: str, port: int, n: int) -> list[str]:
    return [sys.executable, "-m", "builtin_engine", "serve", "--model", c.MODEL, "--dtype", dtype,
            "--port", str(port), "--served-model-name", "smollm2", "--max-num-seqs", str(n),
            "--log-level", "warning"]


def find_vllm(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("INFERPLANE_VLLM_PYTHON"), PEERS_CACHE / "vllm/bin/python"):
        if cand and Path(cand).exists():
            return str(cand)
    return None


def find_llama_server(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("INFERPLANE_LLAMA_SERVER"), PEERS_CACHE / "llama-server",
                 shutil.which("llama-server")):
        if cand and Path(cand).exists():
            return str(cand)
    return None


def vllm_command(python: str, hf_dir: str, dtype: str, port: int) -> tuple[list[str], dict]:
    venv = Path(python).parent.parent
    env = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "auto",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_CACHE_ROOT": str(PEERS_CACHE / "vllm-cache")}
    iomp = next(venv.glob("lib/libiomp5.so"), None)
    if iomp:
        env["LD_PRELOAD"] = str(iomp)
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", hf_dir, "--host",
            "127.0.0.1", "--port", str(port), "--dtype", dtype, "--max-model-len", "2048",
            "--served-model-name", "smollm2"], env


def llama_command(binary: str, port: int, n: int) -> list[str]:
    from builtin_engine.loader import resolve_model
    return [binary, "-m", str(resolve_model(c.MODEL).path), "-np", str(n), "-c", str(640 * n),
            "-t", "2", "--host", "127.0.0.1", "--port", str(port), "--alias", "smollm2",
            "--metrics"]


def serve_and_measure(name: str, cmd: list[str], env: dict, port: int, items: list[dict],
                      timeout: float) -> dict:
    log_path = c.RESULTS_DIR / f"engine_peers-{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=c.ROOT,
                                env={**os.environ, **env}, start_new_session=True)
        try:
            client.wait_ready(f"http://127.0.0.1:{port}", proc, timeout)
            client.run_load(f"http://127.0.0.1:{port}", items[:2], max_tokens=4)  # warm-up
            c.log(f"{name}: measuring {len(items)} requests")
            return client.run_load(f"http://127.0.0.1:{port}", items)
        finally:
            client.stop(proc)


def hf_per_request(items: list[dict], subset: int, seed: int) -> dict:
    import torch
    model = c.load_hf()
    from builtin_engine.tokenizer import load_tokenizer
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
            "extrapolated": True}


# ---- run ---------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--hf-subset", type=int, default=4, help="0 skips HF transformers")
    p.add_argument("--hf-dir", default=str(PEERS_CACHE / "smollm2-hf"),
                   help="the model as an HF directory (for vLLM)")
    p.add_argument("--vllm-python", default=None)
    p.add_argument("--llama-server", default=None)
    p.add_argument("--port-base", type=int, default=19750)
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot-copy", default=None, help="also copy the PNG here")
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    items = workload(args.num_requests, args.seed)
    n = args.num_requests
    engines: list[tuple[str, list[str], dict]] = []
    for i, dtype in enumerate(d for d in args.dtypes.split(",") if d):
        engines.append((f"builtin {dtype}", builtin_command(dtype, args.port_base + i, n), {}))
    skipped = []
    vllm = find_vllm(args.vllm_python)
    if vllm and Path(args.hf_dir).exists():
        for i, dtype in enumerate(("float32", "bfloat16")):
            engines.append((f"vLLM CPU {dtype}", *vllm_command(vllm, args.hf_dir, dtype,
                                                                args.port_base + 10 + i)))
    else:
        skipped.append("vLLM CPU (no install found)")
    llama = find_llama_server(args.llama_server)
    if llama:
        engines.append(("llama-server Q4_1", llama_command(llama, args.port_base + 20, n), {}))
    else:
        skipped.append("llama-server (no binary found)")
    rows = {}
    for name, cmd, env in engines:
        port = int(cmd[cmd.index("--port") + 1])
        rows[name] = serve_and_measure(name.replace(" ", "_"), cmd, env, port, items,
                                       args.ready_timeout)
        c.log(f"{name}: {rows[name]['output_tokens_per_s']:.1f} output tok/s")
    if args.hf_subset:
        rows["HF transformers per request"] = hf_per_request(items, args.hf_subset + 1, args.seed)
    result = {"workload": {"num_requests": n, "prompt_words": "16-400",
                           "output_tokens": sum(w["max_tokens"] for w in items)},
              "cpu_count": os.cpu_count(), "engines": rows, "skipped": skipped}
    path = c.write_result("engine_peers", result, args.output)
    plot = client.plot(result, path.with_suffix(".png"))
    if args.plot_copy:
        Path(args.plot_copy).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plot, args.plot_copy)
    client.report(result, path, plot)
    return result


if __name__ == "__main__":
    main()

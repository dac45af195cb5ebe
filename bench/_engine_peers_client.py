"""The HTTP side of bench/engine_peers.py: the streamed load, the table, the ratios, the plot.

    row = run_load("http://127.0.0.1:P", [{"prompt": "...", "max_tokens": 64}, ...])
    # row: output_tokens_per_s, elapsed_s, ttft/itl percentiles (seconds)

All requests go out at once on one asyncio loop (OpenAI /v1/completions, stream=true, greedy,
ignore_eos, usage in the last chunk). TTFT is submission to the first chunk with text; each
later chunk with text adds one inter-token gap.
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx

import _common as c


async def _one(http: httpx.AsyncClient, base: str, item: dict, max_tokens: int | None,
               t0: float) -> dict:
    body = {"model": "smollm2", "prompt": item["prompt"], "temperature": 0.0,
            "max_tokens": max_tokens or item["max_tokens"], "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    times, tokens = [], 0
    async with http.stream("POST", f"{base}/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{base}: HTTP {resp.status_code}: {(await resp.aread())[:300]}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if any(ch.get("text") for ch in chunk.get("choices") or ()):
                times.append(time.perf_counter())
    if not times:
        raise RuntimeError(f"{base}: a stream carried no text")
    return {"ttft": times[0] - t0, "itl": [b - a for a, b in zip(times, times[1:])],
            "tokens": tokens, "end": times[-1]}


async def _load(base: str, items: list[dict], max_tokens: int | None) -> dict:
    limits = httpx.Limits(max_connections=len(items) + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600.0), limits=limits,
                                 trust_env=False) as http:
        t0 = time.perf_counter()
        done = await asyncio.gather(*(_one(http, base, w, max_tokens, t0) for w in items))
    elapsed = max(d["end"] for d in done) - t0
    tokens = sum(d["tokens"] for d in done)
    ttft = [d["ttft"] for d in done]
    itl = [g for d in done for g in d["itl"]]
    row = {"elapsed_s": elapsed, "output_tokens": tokens, "output_tokens_per_s": tokens / elapsed}
    for name, values in (("ttft", ttft), ("itl", itl)):
        for q in (0.5, 0.9, 0.99):
            row[f"{name}_p{round(q * 100)}_s"] = c.percentile(values, q)
    return row


def run_load(base: str, items: list[dict], max_tokens: int | None = None) -> dict:
    return asyncio.run(_load(base, items, max_tokens))


def report(result: dict, path: Path, plot: Path) -> None:
    rows = result["engines"]
    print(f"command: {c.command_line()}")
    w = result["workload"]
    print(f"workload: {w['num_requests']} requests at once, prompts {w['prompt_words']} words, "
          f"{w['output_tokens']} output tokens, greedy, ignore_eos; {result['cpu_count']} CPUs "
          "(shared host: compare ratios)")
    best = max(r["output_tokens_per_s"] for r in rows.values())
    print("| engine | output tok/s | vs best | TTFT p50 / p99 (s) | ITL p50 / p99 (ms) |")
    print("|---|---|---|---|---|")
    for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["output_tokens_per_s"]):
        tps = r["output_tokens_per_s"]
        if "ttft_p50_s" in r:
            lat = (f"{r['ttft_p50_s']:.2f} / {r['ttft_p99_s']:.2f} | "
                   f"{r['itl_p50_s'] * 1e3:.0f} / {r['itl_p99_s'] * 1e3:.0f}")
        else:
            lat = f"({r['timed_requests']} requests timed, extrapolated) | -"
        print(f"| {name} | {tps:.1f} | {tps / best:.2f}x | {lat} |")
    for line in ratios(rows):
        print(line)
    loads = [x for r in rows.values() for x in r.get("load_avg_1m", ())]
    if loads:
        print(f"load average (1 min) while measuring: {min(loads):.1f}-{max(loads):.1f}")
    for s in result["skipped"]:
        print(f"skipped: {s}")
    print(f"result file: {path}\nplot: {plot}")


def ratios(rows: dict) -> list[str]:
    """The goal ratios of the default builtin engine against vLLM's faster dtype and llama."""
    default = next((r for n, r in rows.items() if "the default" in n), None)
    if default is None:
        return []
    out = []
    vllm = {n: r for n, r in rows.items() if n.startswith("vLLM")}
    llama = {n: r for n, r in rows.items() if n.startswith("llama-server")}
    for label, peers in (("vLLM CPU (its faster dtype)", vllm), ("llama-server", llama)):
        if peers:
            name, best = max(peers.items(), key=lambda kv: kv[1]["output_tokens_per_s"])
            ratio = default["output_tokens_per_s"] / best["output_tokens_per_s"]
            out.append(f"builtin default / {label}: {ratio:.2f}x ({name})")
            mine, theirs = (default.get("rounds_output_tokens_per_s", ()),
                            best.get("rounds_output_tokens_per_s", ()))
            if len(mine) > 1 and len(mine) == len(theirs):
                each = ", ".join(f"{a / b:.2f}x ({a:.0f} / {b:.0f})" for a, b in zip(mine, theirs))
                out.append(f"  round by round: {each}")
    return out


def short_label(name: str) -> str:
    """The engine's name without its parenthesised detail (the table keeps the full name)."""
    return name.split(" (")[0]


def plot(result: dict, target: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = sorted(result["engines"].items(), key=lambda kv: -kv[1]["output_tokens_per_s"])
    names = [short_label(n) for n, _ in rows]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    axes[0].barh(names, [r["output_tokens_per_s"] for _, r in rows], color="#4c72b0")
    axes[0].set_xlabel("output tokens/s (higher is better)")
    axes[0].invert_yaxis()
    timed = [(n, r) for n, r in rows if "ttft_p50_s" in r]
    for ax, key, scale, label in ((axes[1], "ttft", 1.0, "TTFT (s)"),
                                  (axes[2], "itl", 1e3, "inter-token latency (ms)")):
        ys = range(len(timed))
        for q, color in (("p50", "#55a868"), ("p99", "#c44e52")):
            ax.barh([y + (0.2 if q == "p99" else -0.2) for y in ys],
                    [r[f"{key}_{q}_s"] * scale for _, r in timed], height=0.4,
                    color=color, label=q)
        ax.set_yticks(list(ys), [short_label(n) for n, _ in timed])
        ax.invert_yaxis()
        ax.set_xlabel(label + " (lower is better)")
        ax.legend()
    w = result["workload"]
    fig.suptitle(f"{w['num_requests']} requests at once, {w['output_tokens']} output tokens, "
                 f"{result['cpu_count']} CPUs")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target

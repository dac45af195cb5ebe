"""A serving benchmark for any OpenAI-compatible endpoint (Inferplane, vLLM, llama.cpp, …).

    inferplane bench serve --base-url http://127.0.0.1:8000/v1 --model smollm2-135m-instruct \
        --api-key "$(cat .inferplane/admin.key)" --dataset synthetic --input-len 128 \
        --output-len 64 --num-prompts 100 --request-rate 4 --goodput ttft:1000 tpot:100
    inferplane bench serve --dataset shared-prefix --tenants 8 --prefix-len 512 …
    inferplane bench serve --dataset sharegpt --dataset-path ShareGPT_V3.json …
    inferplane bench serve compare run-a.json run-b.json      # side by side, ratios to the first

Load: a fixed request rate (`--request-rate R`, Poisson arrivals by default, `--arrival
constant`), or everything at once (`inf`) capped by `--max-concurrency C`. `--warmup N`
requests run first and are not counted. Prints a table (TTFT, TPOT, ITL, end-to-end latency at
P50/P90/P99, request and token throughput, goodput under the given SLOs, errors by kind) and
writes the result JSON (summary plus every request's timings) and a PNG of latency CDFs and
throughput over time under bench/results/ (or --out).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import MODEL, RESULTS_DIR, command_line, log  # noqa: E402
from bench._serve_client import Target, send_all  # noqa: E402
from bench._serve_datasets import build  # noqa: E402
from bench._serve_metrics import parse_slos, summarize, throughput_over_time  # noqa: E402
from bench._serve_report import plot_compare, table  # noqa: E402


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inferplane bench serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--api-key", default=None)
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--no-stream", action="store_true", help="non-streaming requests (no ITL)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="ask the engine for exactly max_tokens (vLLM's extension)")
    p.add_argument("--tokenizer", default=MODEL,
                   help="model name or path whose tokenizer builds and counts prompts")
    p.add_argument("--dataset", choices=["synthetic", "shared-prefix", "sharegpt"],
                   default="synthetic")
    p.add_argument("--dataset-path", help="ShareGPT-format JSON for --dataset sharegpt")
    p.add_argument("--sharegpt-output-len", type=int, default=None)
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--input-len", type=int, default=128,
                   help="prompt tokens (the per-request suffix for shared-prefix)")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="synthetic lengths vary uniformly by ± this fraction")
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--prefix-len", type=int, default=512)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--goodput", nargs="*", metavar="NAME:MS",
                   help="SLOs for goodput: ttft, tpot, itl (worst gap), e2el in milliseconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    p.add_argument("--label", default=None, help="the run's name in tables and plots")
    p.add_argument("--out", default=None, help="result JSON path (PNG beside it)")
    p.add_argument("--no-progress", action="store_true")
    return p


def _progress(total: int, enabled: bool, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="req", disable=not enabled, file=sys.stderr)


async def _run(args, target: Target, prompts) -> tuple[list, float]:
    warm, measured = prompts[:args.warmup], prompts[args.warmup:]
    if warm:
        with _progress(len(warm), not args.no_progress, "warm-up") as bar:
            await send_all(target, warm, float("inf"), args.arrival, args.max_concurrency,
                           args.seed, bar.update)
    with _progress(len(measured), not args.no_progress, "benchmark") as bar:
        start = time.perf_counter()
        records = await send_all(target, measured, args.request_rate, args.arrival,
                                 args.max_concurrency, args.seed, bar.update)
        return records, time.perf_counter() - start


def run(argv: list[str]) -> dict:
    args = run_parser().parse_args(argv)
    slos = parse_slos(args.goodput)
    from builtin_engine.loader.tokenizer import load_tokenizer
    log(f"building {args.num_prompts + args.warmup} {args.dataset} prompts "
        f"with the {args.tokenizer} tokenizer")
    prompts = build(args, load_tokenizer(args.tokenizer))
    target = Target(args.base_url, args.model, args.api_key, args.endpoint,
                    stream=not args.no_stream, ignore_eos=args.ignore_eos,
                    timeout_s=args.timeout)
    records, duration = asyncio.run(_run(args, target, prompts))
    summary = summarize(records, duration, slos)
    label = args.label or f"{args.endpoint}@{args.request_rate:g}/s"
    result = {"benchmark": "serve", "label": label, "command": command_line(),
              "config": {k: v for k, v in vars(args).items() if k != "api_key"},
              "summary": summary, "timeline": throughput_over_time(records),
              "records": [asdict(r) for r in records]}
    out = Path(args.out) if args.out else RESULTS_DIR / f"serve-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    png = plot_compare([(label, result)], out.with_suffix(".png"))
    print(table([(label, summary)]))
    log(f"result: {out}\nplot:   {png}")
    return result


def compare(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="inferplane bench serve compare")
    p.add_argument("results", nargs="+", help="result JSON files; the first is the baseline")
    p.add_argument("--out", default=None, help="PNG path for the overlaid plots")
    args = p.parse_args(argv)
    runs = []
    for path in args.results:
        result = json.loads(Path(path).read_text())
        runs.append((result.get("label") or Path(path).stem, result))
    print(table([(name, r["summary"]) for name, r in runs]))
    out = args.out or RESULTS_DIR / f"serve-compare-{time.strftime('%Y%m%d-%H%M%S')}.png"
    log(f"plot: {plot_compare(runs, out)}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        compare(argv[1:])
    else:
        run(argv)


if __name__ == "__main__":
    main()

"""Cross-check of `inferplane bench serve` against an independent client (NVIDIA aiperf) on
the same endpoint, same load, in one run.

    inferplane bench serve_agreement [--rate 1.5] [--num-prompts 30] [--input-len 128]
        [--output-len 32] [--rounds 2] [--peers-dir /work/peers-cache]
        [--base-url URL --model M]      # an existing endpoint instead of a fresh builtin engine

Without --base-url it starts the builtin engine (real SmolLM2 weights) on a free port. The two
clients then run one after the other, alternating for --rounds rounds so drift in the machine's
load hits both alike, each with streaming chat requests at the same Poisson rate, prompt and
output lengths (ignore_eos, so every request yields exactly --output-len tokens; aiperf is told
to count with the server's usage, as bench serve does). Prints TTFT, ITL and end-to-end P50/P90
per client, request and output-token throughput, and the ratio bench serve / aiperf.
aiperf is installed by `bash bench/install_peers.sh DIR aiperf`; it needs the tokenizer as a
Hugging Face directory, written here from the GGUF on first use.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import MODEL, log, write_result  # noqa: E402
from bench.gateway_overhead import free_port  # noqa: E402
from bench.gateway_peers import start  # noqa: E402

BENCH = Path(__file__).resolve().parent
METRICS = [("ttft", "time_to_first_token", "ttft_ms"), ("itl", "inter_token_latency", "itl_ms"),
           ("e2e", "request_latency", "e2el_ms")]


def tokenizer_dir(peers: Path) -> Path:
    """The model's tokenizer as a Hugging Face directory (what aiperf loads), from the GGUF."""
    target = peers / "smollm2-hf"
    if (target / "tokenizer.json").exists():
        return target
    from transformers import AutoTokenizer

    from builtin_engine.loader import resolve_model
    path = resolve_model(MODEL).path
    log(f"writing the tokenizer of {path.name} to {target}")
    AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(target)
    return target


def run_ours(args, base_url: str, model: str, out: Path) -> dict:
    cmd = [sys.executable, str(BENCH / "serve.py"), "--base-url", base_url, "--model", model,
           "--num-prompts", str(args.num_prompts), "--request-rate", str(args.rate),
           "--input-len", str(args.input_len), "--output-len", str(args.output_len),
           "--ignore-eos", "--warmup", "2", "--no-progress", "--out", str(out),
           "--seed", str(args.seed)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    s = json.loads(out.read_text())["summary"]
    row = {name: {q: s[key][q] for q in ("p50", "p90")} for name, _, key in METRICS}
    row.update(req_s=s["request_throughput_rps"], out_tok_s=s["output_throughput_tps"],
               errors=sum(s["errors"].values()))
    return row


def run_aiperf(args, base_url: str, model: str, workdir: Path, tok: Path) -> dict:
    aiperf = Path(args.peers_dir) / "aiperf" / "bin" / "aiperf"
    root = base_url.removesuffix("/").removesuffix("/v1")
    cmd = [str(aiperf), "profile", "--model", model, "--url", root, "--endpoint-type", "chat",
           "--streaming", "--request-rate", str(args.rate), "--request-count",
           str(args.num_prompts), "--warmup-request-count", "2",
           "--isl", str(args.input_len), "--osl", str(args.output_len),
           "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
           "--tokenizer", str(tok), "--ui", "none", "--no-gpu-telemetry",
           "--random-seed", str(args.seed), "--artifact-dir", str(workdir)]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800, cwd=workdir,
                   env=env)
    report = json.loads(next(workdir.rglob("profile_export_aiperf.json")).read_text())
    row = {name: {q: report[key][q] for q in ("p50", "p90")} for name, key, _ in METRICS}
    row.update(req_s=report["request_throughput"]["avg"],
               out_tok_s=report["output_token_throughput"]["avg"],
               errors=sum(e.get("count", 0) for e in report.get("error_summary") or []))
    return row


def mean_rows(rows: list[dict]) -> dict:
    out = {}
    for key in rows[0]:
        if isinstance(rows[0][key], dict):
            out[key] = {q: sum(r[key][q] for r in rows) / len(rows) for q in rows[0][key]}
        else:
            out[key] = sum(r[key] for r in rows) / len(rows)
    return out


def print_table(ours: dict, theirs: dict) -> dict:
    ratios = {}
    print(f"{'metric':<16}{'bench serve':>14}{'aiperf':>12}{'ratio':>9}")
    for name, _, _ in METRICS:
        for q in ("p50", "p90"):
            a, b = ours[name][q], theirs[name][q]
            ratios[f"{name}_{q}"] = a / b if b else float("nan")
            print(f"{name.upper() + ' ' + q + ' ms':<16}{a:>14.1f}{b:>12.1f}"
                  f"{ratios[f'{name}_{q}']:>8.3f}x")
    for key, label in (("req_s", "req/s"), ("out_tok_s", "output tok/s")):
        ratios[key] = ours[key] / theirs[key] if theirs[key] else float("nan")
        print(f"{label:<16}{ours[key]:>14.2f}{theirs[key]:>12.2f}{ratios[key]:>8.3f}x")
    print(f"{'errors':<16}{ours['errors']:>14.0f}{theirs['errors']:>12.0f}")
    return ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default=None)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--rate", type=float, default=1.5)
    p.add_argument("--num-prompts", type=int, default=30)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peers-dir", default=os.environ.get("INFERPLANE_PEERS_DIR",
                                                         "/work/peers-cache"))
    p.add_argument("--output", default=None)
    args = p.parse_args()
    if not (Path(args.peers_dir) / "aiperf" / "bin" / "aiperf").exists():
        raise SystemExit(f"aiperf is not installed under {args.peers_dir}: "
                         f"bash bench/install_peers.sh {args.peers_dir} aiperf")
    tok = tokenizer_dir(Path(args.peers_dir))
    work = Path(tempfile.mkdtemp(prefix="serve-agreement-"))
    engine = None
    base_url = args.base_url
    if base_url is None:
        port = free_port()
        log("starting the builtin engine (real weights)")
        engine = start([sys.executable, "-m", "builtin_engine", "serve", "--model", MODEL,
                        "--port", str(port)], f"http://127.0.0.1:{port}/health",
                       work / "engine.log", timeout=300)
        base_url = f"http://127.0.0.1:{port}/v1"
    ours, theirs = [], []
    try:
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds}: bench serve")
            ours.append(run_ours(args, base_url, args.model, work / f"ours-{r}.json"))
            log(f"round {r + 1}/{args.rounds}: aiperf")
            (work / f"aiperf-{r}").mkdir()
            theirs.append(run_aiperf(args, base_url, args.model, work / f"aiperf-{r}", tok))
    finally:
        if engine is not None:
            engine.terminate()
            engine.wait(timeout=30)
    ratios = print_table(mean_rows(ours), mean_rows(theirs))
    out = write_result("serve_agreement", {"config": vars(args), "bench_serve": ours,
                                           "aiperf": theirs, "ratios": ratios}, args.output)
    print(f"result: {out}")


if __name__ == "__main__":
    main()

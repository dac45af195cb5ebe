"""The default configuration's CPU a request, checkouts side by side, in turns, in one run.

    inferplane bench gateway_trees --tree /path/to/base --tree . [--rounds 4] [--rate 1000]
        [--duration 8] [--workers 2] [--spread]

Each round runs `gateway_peers --only inferplane` (the default: `inferplane up --workers N` with
a minimal config in front of the fast mock engine) once for every --tree in turn, with `up`
imported from that checkout and everything else (the mock, the load generator, this script)
from this one: what differs between the rows is the gateway. Whole-process CPU a request on a
shared 2-core host moves by ±15% from run to run, and with two workers by more, depending on
how the load generator's connections landed on them (the per-process split is printed): read
the medians of several rounds, each tree against the first. For counts that do not move, see
`gateway_instructions`. A JSON result and a PNG (every run as a dot, medians as bars) go under
bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import write_result  # noqa: E402

BENCH = Path(__file__).resolve().parent
KINDS = ("non_stream", "stream")


def run_once(tree: Path, args, out: Path) -> dict:
    """One gateway_peers run of the default with `up` imported from `tree`."""
    cmd = [sys.executable, str(BENCH / "gateway_peers.py"), "--only", "inferplane",
           "--rate", str(args.rate), "--ramp", str(args.rate), "--duration", str(args.duration),
           "--workers", str(args.workers), "--output", str(out)] + \
        (["--spread"] if args.spread else [])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.STDOUT, timeout=args.duration * 40 + 300)
    result = json.loads(out.read_text())["results"]["inferplane"]
    return {kind: {"cpu_ms": result[kind]["cpu_ms_per_request"],
                   "by_process": result[kind]["cpu_ms_by_process"],
                   "added_p99_ms": result[kind]["added_p99_ms"],
                   "held_rps": result[kind]["held_rps"],
                   "errors": result[kind]["errors"]} for kind in KINDS}


def summarise(trees: list[str], runs: dict[str, list[dict]]) -> dict:
    first = trees[0]
    out = {}
    for kind in KINDS:
        base = statistics.median(r[kind]["cpu_ms"] for r in runs[first])
        for tree in trees:
            median = statistics.median(r[kind]["cpu_ms"] for r in runs[tree])
            out.setdefault(tree, {})[kind] = {"median_cpu_ms": median, "vs_first": median / base}
    return out


def plot(trees: list[str], runs: dict, summary: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    labels = [Path(t).name or t for t in trees]
    for ax, kind in zip(axes, KINDS):
        medians = [summary[t][kind]["median_cpu_ms"] for t in trees]
        ax.bar(range(len(trees)), medians, color="#9ecae1", label="median")
        for i, tree in enumerate(trees):
            ax.scatter([i] * len(runs[tree]), [r[kind]["cpu_ms"] for r in runs[tree]],
                       color="#08519c", zorder=3, s=18, label="run" if i == 0 else None)
        ax.axhline(0.5, color="#d62728", linestyle="--", linewidth=1, label="0.5 ms")
        ax.set_xticks(range(len(trees)), labels)
        ax.set_title(f"{kind}: CPU a request, all processes (ms)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=None,
                        help="a checkout's root to run `up` from (repeat; the first is the "
                             "baseline; default: this one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--spread", action="store_true",
                        help="the load generator uses every warm connection in turn")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.rounds < 1 or args.rate <= 0 or args.duration <= 0 or args.workers < 1:
        parser.error("--rounds, --rate, --duration and --workers must be positive")
    trees = [str(Path(t).resolve()) for t in (args.tree or [BENCH.parent])]
    for tree in trees:
        if not (Path(tree) / "control_plane").is_dir():
            parser.error(f"{tree} is not a checkout of this project (no control_plane/)")
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    work = Path(tempfile.mkdtemp(prefix="gateway-trees-"))
    for round_no in range(1, args.rounds + 1):
        for i, tree in enumerate(trees):
            r = run_once(Path(tree), args, work / f"r{round_no}-t{i}.json")
            runs[tree].append(r)
            print(f"round {round_no}  {tree}: " + "  ".join(
                f"{k} {r[k]['cpu_ms']:.3f} ms ({'/'.join(f'{x:.2f}' for x in r[k]['by_process'])})"
                f" P99+{r[k]['added_p99_ms']:.1f} ms held {r[k]['held_rps']:.0f}/s"
                for k in KINDS), flush=True)
    summary = summarise(trees, runs)
    for tree in trees:
        print(f"{tree}: " + "  ".join(
            f"{k} median {summary[tree][k]['median_cpu_ms']:.3f} ms "
            f"({summary[tree][k]['vs_first']:.3f}x the first tree)" for k in KINDS))
    out = write_result("gateway_trees", {
        "rate": args.rate, "duration_s": args.duration, "workers": args.workers,
        "spread": args.spread, "trees": trees, "runs": runs, "summary": summary}, args.output)
    print(f"result: {out}\nplot:   {plot(trees, runs, summary, out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()

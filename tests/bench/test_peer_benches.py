"""The side-by-side benchmarks run from a clean checkout: gateway_peers (Inferplane in front of
the fast mock engine) and routing_peers (simulated builtin engines behind Inferplane, and behind
vllm-router when `bash bench/install_peers.sh` has installed it), at a tiny size. Their figures
are not asserted (benchmarks, not timed tests): that every request succeeded and the result
file holds what the report prints."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import _real_engines as real

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float = 600) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_gateway_peers_measures_inferplane(tmp_path):
    result = tmp_path / "gateway_peers.json"
    """`inferplane` is the default configuration under `inferplane up --workers 2`,
    `inferplane-tuned` the gateway alone: both run, so their figures cannot drift apart."""
    # --spread and 3 s: both workers get requests and every process enough CPU ticks (at 1 s,
    # hottest-first, all connections could land on one worker and an idle process read 0)
    run_bench("gateway_peers.py", "--only", "inferplane,inferplane-tuned", "--duration", "3",
              "--rate", "50", "--ramp", "50", "--spread", "--output", str(result))
    results = json.loads(result.read_text())["results"]
    for name in ("inferplane", "inferplane-tuned"):
        for mode in ("non_stream", "stream"):
            assert results[name][mode]["errors"] == {}, (name, results[name][mode])
            assert results[name][mode]["cpu_ms_per_request"] > 0
            assert results[name][mode]["held_rps"] == 50.0
    # `up --workers 2`: its own process and both workers served, each in the split
    split = results["inferplane"]["non_stream"]["cpu_ms_by_process"]
    assert len(split) >= 3 and split == sorted(split, reverse=True)
    assert abs(sum(split) - results["inferplane"]["non_stream"]["cpu_ms_per_request"]) \
        < 0.01 * len(split)


def test_gateway_instructions_counts_the_event_loop_apart(tmp_path):
    """`up` under callgrind, two runs of this checkout: an event-loop figure per run, in the
    range a proxied request costs (hundreds of thousands to a few million instructions), and
    the two runs of the same code close (at this small count one timer's work in one window
    and not the other moves a run by up to ~15%; 300 requests bring that to ~1%)."""
    result = tmp_path / "gateway_instructions.json"
    out = run_bench("gateway_instructions.py", "--requests", "60", "--rounds", "2",
                    "--output", str(result))
    runs = json.loads(result.read_text())["results"][str(ROOT)]
    assert len(runs["loop"]) == 2 and all(2e5 < x < 2e7 for x in runs["loop"]), runs
    assert all(x >= 0 for x in runs["other_threads"])
    assert max(runs["loop"]) / min(runs["loop"]) < 1.3, runs
    assert "1.000x the first tree" in out


def test_routing_peers_compares_strategies():
    runs = ["inferplane:round_robin", "inferplane:prefix_aware"]
    if (real.peers_dir() / "router" / "bin").exists():
        runs.append("vllm-router:cache_aware")
    stdout = run_bench("routing_peers.py", "--engines", "2", "--tenants", "2", "--requests", "12",
                       "--rate", "6", "--system-tokens", "128", "--max-tokens", "4",
                       "--runs", ",".join(runs), "--peers-dir", str(real.peers_dir()))
    path = next(line.split("result:", 1)[1].strip() for line in stdout.splitlines()
                if line.startswith("result:"))
    rows = {r["strategy"]: r for r in json.loads(Path(path).read_text())["runs"]}
    assert set(rows) == set(runs)
    for name, row in rows.items():
        assert row["ok"] == 12 and row["errors"] == 0, (name, row)


def test_gateway_trees_runs_the_default_of_each_checkout_in_turn(tmp_path):
    """Two checkouts (this one and an export of its HEAD), one round, at a tiny size: a run
    per checkout, every request answered, the first tree the baseline (1.000x), its plot
    written; a path that is no checkout is refused before anything starts."""
    base = tmp_path / "base"
    base.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    result = tmp_path / "gateway_trees.json"
    out = run_bench("gateway_trees.py", "--tree", str(base), "--tree", str(ROOT), "--rounds",
                    "1", "--rate", "50", "--duration", "3", "--spread", "--output", str(result))
    data = json.loads(result.read_text())
    assert data["trees"] == [str(base), str(ROOT)]
    for tree in data["trees"]:
        (run,) = data["runs"][tree]
        for mode in ("non_stream", "stream"):
            assert run[mode]["errors"] == {} and run[mode]["held_rps"] == 50.0, run
            assert run[mode]["cpu_ms"] > 0 and len(run[mode]["by_process"]) >= 3
    assert data["summary"][str(base)]["non_stream"]["vs_first"] == 1.0
    assert "(1.000x the first tree)" in out and result.with_suffix(".png").stat().st_size > 0
    refused = subprocess.run([sys.executable, str(ROOT / "bench" / "gateway_trees.py"),
                              "--tree", str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 2 and "not a checkout" in refused.stderr

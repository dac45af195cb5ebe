"""Each engine benchmark runs end to end at tiny sizes, as `python bench/<name>.py`.

They load the real SmolLM2 model (and transformers for the baselines), so the sizes are
the smallest that still exercise every phase; the JSON result must be complete and sane.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run_bench(name: str, tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args,
                           "--threads", "1", "--output", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["command"].endswith(f"--output {out}")
    assert "command: " in proc.stdout and str(out) in proc.stdout
    return result, proc.stdout


def test_engine_throughput(tmp_path):
    result, stdout = run_bench("engine_throughput", tmp_path, "--num-requests", "3",
                               "--max-prompt", "40", "--max-output", "6",
                               "--hf-single-subset", "2", "--hf-batch-size", "2")
    work, builtin = result["workload"], result["builtin"]
    assert work["num_requests"] == 3
    assert builtin["output_tokens"] == work["output_tokens"]
    single, static = result["hf_per_request"], result["hf_static"]
    assert single["timed_requests"] == 2 and single["extrapolated"] is True
    assert single["identical_outputs"] == 2  # 6 greedy tokens agree with transformers
    assert static["output_tokens"] == work["output_tokens"]
    # Ratios are computed from this run's rates, never typed in.
    assert single["speedup"] == pytest.approx(
        builtin["output_tokens_per_s"] / single["output_tokens_per_s"])
    assert static["speedup"] == pytest.approx(
        builtin["output_tokens_per_s"] / static["output_tokens_per_s"])
    assert single["cpu_time_speedup"] > 0 and static["cpu_time_speedup"] > 0
    assert "extrapolated" in stdout


def test_prefix_caching(tmp_path):
    result, stdout = run_bench("prefix_caching", tmp_path, "--num-requests", "3",
                               "--system-tokens", "64", "--user-median", "8",
                               "--output-median", "3", "--max-output", "4", "--rate", "20")
    off, on = result["cache_off"], result["cache_on"]
    assert off["latency"]["prefix_cache_hit_rate"] == 0.0
    # Requests after the first reuse the 64-token system prompt: 4 full blocks each.
    assert on["latency"]["prefix_cache_hit_rate"] > 0.2
    for phase in ("latency", "throughput"):
        assert on[phase]["output_tokens"] == off[phase]["output_tokens"] \
            == result["workload"]["output_tokens"]
    assert result["ttft_p50_speedup"] == pytest.approx(
        off["latency"]["ttft_p50_s"] / on["latency"]["ttft_p50_s"])
    assert "cache on vs off" in stdout


def test_kv_waste_simulated(tmp_path):
    result, stdout = run_bench("kv_waste", tmp_path, "--num-requests", "16",
                               "--block-sizes", "16,4")
    by_size = {r["block_size"]: r for r in result["runs"]}
    for bs, run in by_size.items():
        peak = run["peak"]
        assert peak["allocated_slots"] % bs == 0
        assert peak["allocated_slots"] == peak["used_slots"] + peak["unused_slots"]
        # Only the tail of each request's last block can be empty.
        assert 0 < peak["unused_slots"] < bs * peak["num_requests_holding_blocks"]
    assert by_size[4]["peak"]["waste"] < by_size[16]["peak"]["waste"]
    assert "waste" in stdout


def test_kv_waste_real_model(tmp_path):
    result, _ = run_bench("kv_waste", tmp_path, "--executor", "real", "--num-requests", "3",
                          "--max-prompt", "40", "--max-output", "4", "--block-sizes", "8")
    peak = result["runs"][0]["peak"]
    assert result["executor"] == "real"
    assert 0 < peak["unused_slots"] < 8 * peak["num_requests_holding_blocks"]


def test_inferplane_bench_dispatch(tmp_path):
    """`inferplane bench kv-waste` runs the same script (from the repository root)."""
    out = tmp_path / "kv.json"
    proc = subprocess.run([sys.executable, "-m", "control_plane", "bench", "kv-waste",
                           "--num-requests", "4", "--block-sizes", "8", "--output", str(out)],
                          capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text())["runs"][0]["block_size"] == 8


def test_gc_pause_reports_both_pauses():
    import re
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gc_pause.py")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    match = re.search(r"pause: ([\d.]+) ms without gc_freeze, ([\d.]+) ms with it", proc.stdout)
    assert match, proc.stdout
    unfrozen, frozen = map(float, match.groups())
    assert frozen < unfrozen  # start-up objects are out of the collector's walk


def test_gpu_check_script_runs_end_to_end_on_cpu(tmp_path):
    """The GPU check is one prepared script for scarce GPU time: its own logic (every section,
    the JSON report) is exercised here at toy sizes through the Triton interpreter."""
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--smoke-cpu",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["status"] == "smoke_cpu" and report["errors"] == {}, report["errors"]
    assert report["all_correct"] and len(report["correctness"]) >= 8
    assert {row["kernel"] for row in report["bench"]} >= {"decode", "prefill"}
    assert report["cuda_graphs"]["max_abs_err_replay_vs_eager"] == 0.0
    e2e = report["e2e"]
    assert [run["decode_graphs"] for run in e2e["runs"]] == ["static", "off", "off"]
    requests = e2e["runs"][0]["requests"]
    assert e2e["greedy_identical_requests"] == e2e["graphs_vs_eager_identical_requests"] == requests

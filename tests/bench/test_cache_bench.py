"""bench/cache_bench.py end to end at a small size: the mock engine, the real embedding
engine and a gateway as processes; the result is complete and its ratios come from the run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_cache_bench_reports_hits_and_ratios(tmp_path):
    out = tmp_path / "cache.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cache_bench.py"),
                           "--requests", "20", "--output", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    p50 = result["p50_ms"]
    assert result["exact_hit_vs_miss_ratio"] == pytest.approx(p50["exact_hit"] / p50["exact_miss"])
    assert result["lookup_mean_ms"]["exact"] < 1.0          # in memory: well under a millisecond
    for run in result["semantic"].values():
        assert run["paraphrase_hits"] >= run["paraphrases"] // 2
        assert run["control_false_hits"] == 0
    assert result["in_process"]["request_keys_us"] > 0

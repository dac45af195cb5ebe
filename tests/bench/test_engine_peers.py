"""engine_peers runs every engine `--rounds` times, taking turns, and reports each engine's
median round and the ratio round by round (the host's slow spells land on both sides)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the scripts import their helpers by bare name

import _engine_peers_client as client  # noqa: E402
import engine_peers  # noqa: E402


def test_median_round_keeps_the_middle_run_and_every_rate():
    runs = [{"output_tokens_per_s": v, "ttft_p50_s": v / 100} for v in (410.0, 380.0, 463.0)]
    row = engine_peers.median_round(runs)
    assert row["output_tokens_per_s"] == 410.0 and row["ttft_p50_s"] == 4.1
    assert row["rounds_output_tokens_per_s"] == [410.0, 380.0, 463.0]
    pair = engine_peers.median_round(runs[:2])  # an even count: the lower middle
    assert pair["output_tokens_per_s"] == 380.0


def test_the_ratio_is_reported_round_by_round_against_the_faster_peer():
    rows = {"builtin bfloat16 compiled (the default: auto)":
            engine_peers.median_round([{"output_tokens_per_s": v} for v in (450.0, 390.0)]),
            "vLLM CPU bfloat16":
            engine_peers.median_round([{"output_tokens_per_s": v} for v in (300.0, 260.0)]),
            "vLLM CPU float32": {"output_tokens_per_s": 100.0}}
    lines = client.ratios(rows)
    assert lines[0] == "builtin default / vLLM CPU (its faster dtype): 1.50x (vLLM CPU bfloat16)"
    assert lines[1] == "  round by round: 1.50x (450 / 300), 1.50x (390 / 260)"


def test_two_rounds_of_the_builtin_engine_are_served_and_recorded(tmp_path):
    result = tmp_path / "engine_peers.json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "engine_peers.py"), "--builtin", "eager",
         "--no-vllm", "--no-llama", "--hf-subset", "0", "--num-requests", "2", "--rounds", "2",
         "--output", str(result)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    row = json.loads(result.read_text())["engines"]["builtin float32 eager (--no-compile)"]
    rates = row["rounds_output_tokens_per_s"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    assert row["output_tokens_per_s"] == min(rates)  # two rounds: the lower middle
    assert "(round 2 of 2)" in out.stdout + out.stderr

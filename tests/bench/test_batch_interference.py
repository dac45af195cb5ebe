"""bench/batch_interference.py end to end at a toy size: `inferplane up`, a slot-limited mock
engine, interactive load alone, with a batch running and beside standard-priority load; the
result names every phase and computes its ratios from them."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_batch_interference_smoke(tmp_path):
    out = tmp_path / "bi.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "batch_interference.py"),
                           "--lines", "60", "--phase-s", "1.5", "--rate", "10",
                           "--delay-s", "0.05", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for phase in ("alone", "with_batch", "with_standard_load"):
        assert result[phase]["requests"] == 15 and result[phase]["errors"] == 0
        assert 0 < result[phase]["p50_ms"] <= result[phase]["p99_ms"]
    assert result["batch"]["status"] == "completed"
    assert result["batch"]["counts"] == {"total": 60, "completed": 60, "failed": 0}
    assert result["p99_ratio"] == round(result["with_batch"]["p99_ms"]
                                        / result["alone"]["p99_ms"], 2)
    assert "ratio" in proc.stdout and str(out) in proc.stdout

"""`inferplane bench soak` end to end at a toy size: traffic through `inferplane up`, the
backend killed and restarted, and its plot, table and verdict written."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_soak_smoke(tmp_path):
    out = tmp_path / "soak"
    proc = subprocess.run([sys.executable, "-m", "control_plane", "bench", "soak",
                           "--duration", "16", "--rate", "10", "--sample-s", "1",
                           "--warmup-s", "3", "--restart-at", "0.2", "--quiet-s", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    result = json.loads((out / "soak.json").read_text())
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert proc.returncode == (0 if result["goals_met"] else 1)
    outcomes = result["outcomes"]
    assert outcomes["sent"] == 160 and outcomes["errors"] == [], outcomes["errors"]
    assert outcomes["ok"] > 0 and outcomes["dropped"] > 0
    checks = result["checks"]
    assert checks["no_uninjected_errors"] and checks["every_request_counted"], checks
    assert {"killed_at", "restarted_at", "recovered_at"} <= set(result["restart"])
    assert result["quiet"]["end"]["t"] > result["quiet"]["after_warmup"]["t"] > 3
    assert len(result["samples"]) >= 10
    assert all(s["rss_mib"] > 10 and s["fds"] > 3 and s["tasks"] >= 1
               for s in result["samples"])
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "soak.md").read_text()
    assert "| t (s) | RSS (MiB) |" in table and "goals met" in table
    assert str(out / "soak.png") in proc.stdout

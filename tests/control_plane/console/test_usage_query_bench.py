"""`inferplane bench usage_query` runs end to end at a toy size on both databases (the timing
itself is the benchmark's business, not a test's)."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_usage_query_bench_runs_on_sqlite_and_postgresql():
    out = subprocess.run([sys.executable, "bench/usage_query.py", "--rows", "4800"], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum("4,800 minute rows" in line for line in lines) == 2
    for db in ("sqlite", "postgresql"):
        assert any(line.startswith(f"{db}: slowest median") for line in lines), out.stdout
    assert sum("group_by=team,model,day" in line for line in lines) == 2

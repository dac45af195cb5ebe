"""`inferplane bench soak` end to end at a toy size: traffic through `inferplane up --workers 2`
on PostgreSQL and Redis, the backend killed and restarted, a gateway worker killed and
replaced, the books read back, and its plot, tables and verdict written."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from _soak_procs import loop_metrics, metric_samples  # noqa: E402
from soak import parse_args  # noqa: E402


def test_soak_smoke(tmp_path):
    out = tmp_path / "soak"
    proc = subprocess.run([sys.executable, "-m", "control_plane", "bench", "soak",
                           "--duration", "20", "--rate", "20", "--sample-s", "1",
                           "--warmup-s", "5", "--quiet-s", "3", "--restart-at", "0.5",
                           "--kill-worker-at", "0.75", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert (out / "soak.json").exists(), proc.stderr[-3000:]
    result = json.loads((out / "soak.json").read_text())
    assert proc.returncode == (0 if result["goals_met"] else 1), proc.stderr[-3000:]
    assert result["workers"] == 2 and result["shape"] == "PostgreSQL and Redis"
    outcomes = result["outcomes"]
    assert outcomes["sent"] == 400 and outcomes["errors"] == [], outcomes["errors"]
    assert outcomes["ok"] > 0 and outcomes["dropped"] > 0
    assert outcomes["injected"] == outcomes["injected_engine"] + outcomes["injected_worker"]

    engine, worker = result["faults"]["engine"], result["faults"]["worker"]
    assert {"killed_at", "restarted_at", "recovered_at"} <= set(engine)
    assert worker["replacement"] != worker["pid"] and worker["replaced_at"] >= worker["killed_at"]

    quiet = result["quiet"]
    assert quiet["end"]["t"] > quiet["after_warmup"]["t"] > 5
    before, after = quiet["after_warmup"]["roles"], quiet["end"]["roles"]
    assert {"up", "supervisor", "worker"} <= set(before) and set(before) == set(after)
    assert worker["pid"] in before["worker"]["pids"] and len(before["worker"]["pids"]) == 2
    assert worker["replacement"] in after["worker"]["pids"]
    assert worker["pid"] not in after["worker"]["pids"] and len(after["worker"]["pids"]) == 2
    assert quiet["end"]["tasks"] >= 2          # both workers' loops are counted
    assert len(result["samples"]) >= 10
    assert all(s["rss_mib"] == pytest.approx(sum(r["rss_mib"] for r in s["roles"].values()),
                                             abs=0.1) and s["fds"] > 10
               for s in result["samples"])

    books, checks = result["books"], result["checks"]
    assert checks["no_uninjected_errors"] and checks["every_request_counted"], checks
    assert books["counter_requests"] > 300 and books["answered"] > 300, books
    # Strict: every request the gateway counted is one request-log row and one unit of usage,
    # and the spend it counted is the spend the usage table holds.
    assert books["counter_requests"] == books["log_rows"] == books["usage_requests"], books
    assert books["counter_spend_usd"] == pytest.approx(books["usage_spend_usd"], rel=1e-6)
    assert checks["books_balance"] and checks["answered_requests_logged"], books

    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "soak.md").read_text()
    assert "| goal | measured | verdict |" in text and "## Books (soak model)" in text
    assert "| t (s) | RSS total (MiB) |" in text and "worker supervisor" in text
    assert str(out / "soak.png") in proc.stdout


def test_loop_figures_add_tasks_and_take_the_worst_lag():
    page = ("# HELP inferplane_event_loop_tasks x\ninferplane_event_loop_tasks 7.0\n"
            'inferplane_event_loop_tasks{pid="2"} 5.0\n'
            "inferplane_event_loop_lag_seconds 0.004\n"
            'inferplane_event_loop_lag_seconds{pid="2"} 0.02\n'
            'inferplane_requests_total{model="soak",version="none",code="200"} 3.0\n'
            'inferplane_requests_total{model="other",version="none",code="200"} 9.0\n'
            'inferplane_requests_created{model="soak",version="none",code="200"} 1.7e9\n')
    assert loop_metrics(page) == (12.0, 0.02)
    assert metric_samples(page, "inferplane_requests_total", "soak") == [3.0]


def test_shapes_from_the_command_line():
    assert parse_args([]).workers == 2
    embedded = parse_args(["--sqlite"])
    assert embedded.workers == 1 and embedded.sqlite
    assert parse_args(["--sqlite", "--workers", "3"]).workers == 3
    with pytest.raises(SystemExit):
        parse_args(["--sqlite", "--database-url", "postgresql://x/y"])
    with pytest.raises(SystemExit):
        parse_args(["--kill-worker-at", "1.5"])

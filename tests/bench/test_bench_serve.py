"""`inferplane bench serve` measures what an endpoint really does: run against the fake engine,
whose first-token delay and token gaps are set exactly, its TTFT, ITL, token counts, goodput
and error kinds must come out as configured; compare mode reads the runs back."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import time

import httpx
import pytest


ROOT = Path(__file__).resolve().parents[2]
PORT = 19801


@pytest.fixture(scope="module")
def engine():
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.fake_engine", "--port",
                             str(PORT), "--name", "bench"], cwd=ROOT)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=0.5)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{PORT}"
    finally:
        proc.terminate()
        proc.wait(10)


def configure(engine: str, **cfg) -> None:
    httpx.post(f"{engine}/control", json={"reset": True, **cfg}).raise_for_status()


def bench(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "serve.py"), "--no-progress",
                           "--out", str(out), "--label", name, *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TTFT p99 ms" in proc.stdout
    assert out.with_suffix(".png").stat().st_size > 10_000
    return json.loads(out.read_text())


def test_timings_tokens_and_goodput(engine, tmp_path):
    configure(engine, first_token_delay=0.2, token_delay=0.05)
    result = bench(tmp_path, "stream", "--base-url", f"{engine}/v1", "--model", "m",
                   "--num-prompts", "8", "--request-rate", "20", "--arrival", "constant",
                   "--input-len", "32", "--output-len", "6", "--goodput", "ttft:150")
    s = result["summary"]
    assert s["completed"] == 8 and s["errors"] == {}
    assert s["output_tokens"] == 8 * 6            # the engine's usage chunk
    assert 190 <= s["ttft_ms"]["p50"] <= 600      # the configured 200 ms, not less
    assert 45 <= s["itl_ms"]["p50"] <= 200        # the configured 50 ms gaps
    assert len(result["records"][0]["itl"]) == 5  # 6 content chunks → 5 gaps
    assert s["goodput_rps"] == 0                  # every TTFT misses a 150 ms SLO
    starts = sorted(r["start"] for r in result["records"])
    assert starts[-1] - starts[0] >= 0.3          # constant 20/s: 8 sends span 350 ms


def test_errors_by_kind_and_datasets(engine, tmp_path):
    configure(engine, fail_status=503)
    failed = bench(tmp_path, "failing", "--base-url", f"{engine}/v1", "--model", "m",
                   "--num-prompts", "5", "--warmup", "0", "--dataset", "shared-prefix",
                   "--tenants", "2", "--prefix-len", "40", "--input-len", "8")
    assert failed["summary"]["errors"] == {"http_503": 5}
    assert failed["summary"]["completed"] == 0
    tenants = {r["tenant"] for r in failed["records"]}
    assert tenants == {"tenant-0", "tenant-1"}

    configure(engine)
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "Tell me about the sea and its tides."},
                           {"from": "gpt", "value": "The sea rises and falls twice a day."}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
    ]))
    ok = bench(tmp_path, "sharegpt", "--base-url", f"{engine}/v1", "--model", "m",
               "--num-prompts", "1", "--warmup", "0", "--dataset", "sharegpt",
               "--dataset-path", str(share), "--endpoint", "completions", "--no-stream")
    assert ok["summary"]["completed"] == 1
    record = ok["records"][0]
    assert record["ttft"] == record["e2e"] and record["output_tokens"] > 4

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "serve.py"), "compare",
                           str(tmp_path / "sharegpt.json"), str(tmp_path / "failing.json"),
                           "--out", str(tmp_path / "cmp.png")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = proc.stdout.splitlines()[0].split()
    assert header == ["metric", "sharegpt", "failing"]
    assert "http_503=5" in proc.stdout and (tmp_path / "cmp.png").exists()

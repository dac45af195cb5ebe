"""Concurrent admission never exceeds the TPM limit: two OS processes sharing Redis, or many
coroutines sharing the in-memory limiter."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from gateway.limits import InMemoryRateLimiter
from tests.gateway.policies.conftest import REDIS_URL
from tests.gateway.policies.hammer import hammer

TPM = 6000
DURATION_S = 1.5
ROOT = Path(__file__).resolve().parents[3]


async def _run_two_processes(prefix: str) -> list[dict]:
    start_at = time.time() + 1.5     # both processes start hammering at the same moment
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.gateway.policies.hammer", REDIS_URL, prefix, str(TPM),
        str(start_at), str(DURATION_S), str(seed), cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for seed in (1, 2)]
    results = []
    for proc in procs:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, err.decode()
        results.append(json.loads(out))
    return results


async def _run_in_memory() -> list[dict]:
    limiter = InMemoryRateLimiter()
    deadline = time.time() + DURATION_S
    return list(await asyncio.gather(hammer(limiter, TPM, deadline, 1),
                                     hammer(limiter, TPM, deadline, 2)))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["memory", "redis"])
async def test_concurrent_admission_stays_within_tpm(mode, redis_prefix):
    results = await (_run_two_processes(redis_prefix) if mode == "redis" else _run_in_memory())
    total = sum(r["tokens"] for r in results)
    assert total <= TPM * 1.01
    assert total >= TPM * 0.95               # the limiter did not just reject everything
    assert all(r["requests"] > 0 and r["rejected"] > 0 for r in results)
    assert all(r.get("store_failures", 0) == 0 for r in results)

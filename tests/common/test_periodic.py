"""common.periodic: runs on its interval until stopped, once however often started, and a stop
mid-run waits for the run (a cancelled database write could not tell what it wrote)."""
from __future__ import annotations

import asyncio

from common.periodic import Periodic


async def test_runs_every_interval_until_stopped():
    runs: list[float] = []

    async def tick() -> None:
        runs.append(asyncio.get_running_loop().time())
    timer = Periodic(tick, 0.02, "t")
    timer.start()
    timer.start()                       # one task, not two
    await asyncio.sleep(0.15)
    await timer.stop()
    count = len(runs)
    assert 3 <= count <= 8, runs
    assert all(b - a >= 0.015 for a, b in zip(runs, runs[1:])), runs
    await asyncio.sleep(0.06)
    assert len(runs) == count           # stopped: no more runs


async def test_stop_lets_a_run_in_progress_finish_and_starts_no_other():
    started, finished = asyncio.Event(), []

    async def slow() -> None:
        started.set()
        await asyncio.sleep(0.1)
        finished.append(True)
    timer = Periodic(slow, 0.001, "t")
    timer.start()
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(timer.stop(), 5)
    assert finished == [True]

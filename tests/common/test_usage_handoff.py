"""common.usage_handoff: a worker's records reach the spool at once and are handed off in
segments on a timer, every max_segment records, and at close; none is written here."""
from __future__ import annotations

import asyncio
import time

from common.usage_handoff import SpoolHandoff
from common.usage_spool import READY, UsageSpool, read_segment
from tests.common.test_usage_spool import record


def ready_ids(directory) -> list[list[str]]:
    return [[r.request_id for r in read_segment(p)]
            for p in sorted(directory.glob(f"*{READY}"), key=lambda p: int(
                p.name.split("-")[1].split(".")[0]))]


async def test_records_are_handed_off_on_the_timer(tmp_path):
    handoff = SpoolHandoff(UsageSpool(tmp_path), interval_ms=30)
    await handoff.start()
    handoff.record(record(1))
    assert ready_ids(tmp_path) == []                 # in the open segment, not ready yet
    deadline = time.monotonic() + 5
    while not ready_ids(tmp_path) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert ready_ids(tmp_path) == [["r1"]] and handoff.handed_off == 1
    await asyncio.sleep(0.1)                         # idle ticks hand off no empty segment
    assert len(list(tmp_path.iterdir())) == 1
    await handoff.close()


async def test_a_full_segment_goes_at_once_and_close_hands_off_the_rest(tmp_path):
    handoff = SpoolHandoff(UsageSpool(tmp_path), interval_ms=60_000, max_segment=2)
    await handoff.start()
    for i in range(5):
        handoff.record(record(i))
    assert ready_ids(tmp_path) == [["r0", "r1"], ["r2", "r3"]]
    await handoff.close()
    assert ready_ids(tmp_path) == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert handoff.handed_off == 5

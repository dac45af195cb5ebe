"""common.usage_spool with common.usage_writer: records survive a process killed outright,
are written once by whoever adopts them, and leave no file behind once in the sink."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from common.usage_record import RequestBodies, UsageRecord
from common.usage_spool import UsageSpool, read_segment
from common.usage_writer import UsageWriter
from tests.common.processes import dead_pid


def record(i: int) -> UsageRecord:
    return UsageRecord(request_id=f"r{i}", key_id="1", team="t", model="m", version="v1",
                       backend="b", prompt_tokens=i, completion_tokens=2 * i, cost_usd=0.5)




def killed_writer(spool_dir: Path, n: int) -> None:
    """A child process that accounts `n` requests and is SIGKILLed before any flush."""
    pid = os.fork()
    if pid == 0:
        try:
            writer = UsageWriter(lambda batch: None, flush_interval_ms=60_000,
                                 spool=UsageSpool(spool_dir))
            for i in range(n):
                writer.record(record(i))
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL


def test_bodies_and_cache_fields_come_back_as_they_were(tmp_path):
    spool = UsageSpool(tmp_path)
    bodies = RequestBodies(mode="full", policy="pii", request_body="[EMAIL] hi",
                           findings=({"rule": "email", "action": "mask", "count": 1},))
    original = dataclasses.replace(record(1), bodies=bodies, cache="hit")
    spool.append(original)
    assert read_segment(spool.seal()[0]) == [original]


def test_segments_round_trip_and_a_torn_line_is_skipped(tmp_path):
    spool = UsageSpool(tmp_path)
    spool.append(record(1))
    spool.append(record(2))
    sealed = spool.seal()
    assert [r.request_id for r in read_segment(sealed[0])] == ["r1", "r2"]
    with open(sealed[0], "ab") as f:
        f.write(b'{"request_id": "r3", "key_')          # the process died mid-write
    assert [r.request_id for r in read_segment(sealed[0])] == ["r1", "r2"]
    spool.release(sealed)
    assert list(tmp_path.iterdir()) == []


async def test_records_of_a_killed_process_are_written_by_the_next_one(tmp_path):
    killed_writer(tmp_path, 25)
    assert len(list(tmp_path.glob("*.jsonl"))) == 1        # the kill left them on disk
    written: list[UsageRecord] = []
    writer = UsageWriter(written.extend, flush_interval_ms=50, spool=UsageSpool(tmp_path))
    await writer.start()
    writer.record(record(100))
    await writer.close()
    assert sorted(r.request_id for r in written) == sorted(
        [f"r{i}" for i in range(25)] + ["r100"])
    assert list(tmp_path.glob("*.jsonl")) == []            # all in the sink: nothing kept


async def test_adopted_records_go_to_the_replay_sink_in_batches_of_their_own(tmp_path):
    killed_writer(tmp_path, 5)
    fresh: list[list[str]] = []
    replayed: list[list[str]] = []
    writer = UsageWriter(lambda b: fresh.append([r.request_id for r in b]), max_batch=3,
                         flush_interval_ms=50, spool=UsageSpool(tmp_path),
                         replay_sink=lambda b: replayed.append([r.request_id for r in b]))
    await writer.start()
    writer.record(record(100))
    await writer.close()
    assert replayed == [["r0", "r1", "r2"], ["r3", "r4"]]   # never mixed with r100
    assert fresh == [["r100"]]


async def test_two_survivors_adopt_a_segment_once(tmp_path):
    orphan = tmp_path / f"{dead_pid()}-0.jsonl"
    orphan.write_bytes(b"".join(orjson.dumps(record(i)) + b"\n" for i in range(3)))
    first, second = UsageSpool(tmp_path), UsageSpool(tmp_path)
    adopted = list(first.adopt_orphans())
    assert [len(records) for _, records in adopted] == [3]
    assert list(second.adopt_orphans()) == []


def test_segments_of_live_processes_are_left_alone(tmp_path):
    (tmp_path / f"{os.getppid()}-0.jsonl").write_bytes(b"")
    assert list(UsageSpool(tmp_path).adopt_orphans()) == []


async def test_a_batch_given_up_at_close_stays_on_disk_for_the_next_start(tmp_path):
    def broken(batch):
        raise ConnectionError("database down")
    writer = UsageWriter(broken, flush_interval_ms=50, max_attempts=2, spool=UsageSpool(tmp_path))
    await writer.start()
    for i in range(5):
        writer.record(record(i))
    await writer.close()
    assert writer.dropped == 5
    leftovers = [r for path in tmp_path.glob("*.jsonl") for r in read_segment(path)]
    assert [r.request_id for r in leftovers] == [f"r{i}" for i in range(5)]


async def test_segments_go_as_soon_as_their_records_are_written(tmp_path):
    written: list[UsageRecord] = []
    writer = UsageWriter(written.extend, flush_interval_ms=20, max_batch=2,
                         spool=UsageSpool(tmp_path))
    await writer.start()
    for i in range(7):
        writer.record(record(i))
    deadline = time.monotonic() + 5
    while len(written) < 7 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(written) == 7 and list(tmp_path.glob("*.jsonl")) == []
    await writer.close()


@pytest.mark.parametrize("n", [0, 1])
async def test_no_records_no_files(tmp_path, n):
    writer = UsageWriter(lambda batch: None, flush_interval_ms=20, spool=UsageSpool(tmp_path))
    await writer.start()
    for i in range(n):
        writer.record(record(i))
    await writer.close()
    assert list(tmp_path.glob("*.jsonl")) == []


def test_a_handed_off_segment_is_collected_while_its_owner_lives(tmp_path):
    worker, writer = UsageSpool(tmp_path), UsageSpool(tmp_path)
    worker.append(record(1))
    worker.append(record(2))
    ready = worker.hand_off()
    assert ready.name.endswith(".ready.jsonl") and worker.hand_off() is None
    # Segments named after this process are its own and never collected: rename the ready one
    # to the parent's (alive) to stand for another worker's.
    theirs = ready.with_name(f"{os.getppid()}-{ready.name.split('-', 1)[1]}")
    ready.rename(theirs)
    collected = list(writer.collect())
    assert [([r.request_id for r in records], replayed)
            for _, records, replayed in collected] == [(["r1", "r2"], False)]
    assert list(writer.collect()) == []                     # taken once
    assert list(writer.adopt_orphans()) == []               # nothing left for anyone else


def test_an_open_segment_is_collected_only_once_its_owner_died(tmp_path):
    (tmp_path / f"{os.getppid()}-0.jsonl").write_bytes(orjson.dumps(record(1)) + b"\n")
    (tmp_path / f"{dead_pid()}-0.jsonl").write_bytes(orjson.dumps(record(2)) + b"\n")
    collected = list(UsageSpool(tmp_path).collect())
    # the dead owner's records may be in the sink already (it died after writing them)
    assert [([r.request_id for r in records], replayed)
            for _, records, replayed in collected] == [(["r2"], True)]
    assert (tmp_path / f"{os.getppid()}-0.jsonl").exists()


def test_a_writer_that_died_leaves_its_ready_segments_to_in_process_writers(tmp_path):
    """`up --workers` stopped for good: a later single-process gateway adopts what was handed
    off and never collected."""
    (tmp_path / f"{dead_pid()}-3.ready.jsonl").write_bytes(orjson.dumps(record(5)) + b"\n")
    adopted = list(UsageSpool(tmp_path).adopt_orphans())
    assert [[r.request_id for r in records] for _, records in adopted] == [["r5"]]

"""common.usage_collector: the writer of `up --workers N` takes what worker processes hand off
(and what a killed worker left open), writes it in batches that never mix records that may be
written already with fresh ones, keeps everything on disk while the sink fails, and removes a
segment's file only once all its records are in."""
from __future__ import annotations

import os
import signal

from common.usage_collector import SpoolCollector
from common.usage_handoff import SpoolHandoff
from common.usage_spool import UsageSpool
from tests.common.test_usage_spool import record


def worker(spool_dir, first: int, n: int, killed: bool = False, hand_off: bool = True) -> None:
    """A child process accounting `n` requests: it hands them off and exits, or is SIGKILLed
    with them in its open segment."""
    pid = os.fork()
    if pid == 0:
        try:
            handoff = SpoolHandoff(UsageSpool(spool_dir), interval_ms=60_000)
            for i in range(first, first + n):
                handoff.record(record(i))
            if hand_off:
                handoff.hand_off()
            if killed:
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


class Sink:
    def __init__(self, failures: int = 0):
        self.batches: list[tuple[list[str], bool]] = []
        self.failures = failures

    def __call__(self, batch, replayed: bool) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("database down")
        self.batches.append(([r.request_id for r in batch], replayed))

    def ids(self) -> list[str]:
        return sorted((i for ids, _ in self.batches for i in ids), key=lambda s: int(s[1:]))


async def test_handed_off_and_killed_workers_records_are_written_once(tmp_path):
    worker(tmp_path, 0, 3)                                     # handed off, then exited
    worker(tmp_path, 3, 2, killed=True, hand_off=False)       # killed with an open segment
    sink = Sink()
    collector = SpoolCollector(UsageSpool(tmp_path), sink)
    assert await collector.collect()
    assert sink.ids() == [f"r{i}" for i in range(5)]
    assert sorted(replayed for _, replayed in sink.batches) == [False, True]
    assert list(tmp_path.iterdir()) == [] and collector.written == 5
    assert await collector.collect() and collector.written == 5   # nothing twice


async def test_batches_split_segments_and_a_file_goes_when_all_its_records_are_in(tmp_path):
    worker(tmp_path, 0, 5)
    written: list[list[str]] = []
    seen_files: list[int] = []

    def sink(batch, replayed):
        seen_files.append(len(list(tmp_path.iterdir())))
        written.append([r.request_id for r in batch])
    collector = SpoolCollector(UsageSpool(tmp_path), sink, max_batch=2)
    assert await collector.collect()
    assert written == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert seen_files == [1, 1, 1] and list(tmp_path.iterdir()) == []


async def test_a_failing_sink_keeps_the_records_and_replays_the_failed_batch(tmp_path):
    """The failed batch may have committed before its error came back: it is replayed (the SQL
    sink then skips what is logged), records of later segments are not."""
    worker(tmp_path, 0, 2)
    sink = Sink(failures=2)
    collector = SpoolCollector(UsageSpool(tmp_path), sink)
    assert not await collector.collect()
    worker(tmp_path, 2, 1)                                     # handed off during the outage
    assert not await collector.collect()
    assert len(list(tmp_path.iterdir())) == 2 and collector.pending == 3
    assert await collector.collect()
    assert sink.batches == [(["r0", "r1"], True), (["r2"], False)]
    assert collector.failed_flushes == 2 and list(tmp_path.iterdir()) == []


async def test_close_leaves_what_it_could_not_write_for_the_next_start(tmp_path):
    worker(tmp_path, 0, 2)
    broken = SpoolCollector(UsageSpool(tmp_path), Sink(failures=99), max_attempts=2)
    await broken.start()
    await broken.close()
    assert broken.failed_flushes >= 2
    mine = list(tmp_path.iterdir())
    assert len(mine) == 1 and mine[0].name.startswith(f"{os.getpid()}-adopted-")
    # the next process (here: one whose pid differs) finds it as a dead process's segment
    mine[0].rename(tmp_path / mine[0].name.replace(str(os.getpid()), "999999999", 1))
    sink = Sink()
    assert await SpoolCollector(UsageSpool(tmp_path), sink).collect()
    assert sink.batches == [(["r0", "r1"], True)]


async def test_during_an_outage_no_more_than_max_pending_records_are_read_into_memory(
        tmp_path):
    for first in (0, 2, 4):
        worker(tmp_path, first, 2)
    sink = Sink(failures=1)
    collector = SpoolCollector(UsageSpool(tmp_path), sink, max_pending=3)
    assert not await collector.collect()
    assert collector.pending == 4                                  # two segments, then full
    assert len(list(tmp_path.glob("*.ready.jsonl"))) == 1          # the third waits on disk
    assert await collector.collect()
    assert sink.ids() == [f"r{i}" for i in range(6)] and list(tmp_path.iterdir()) == []

"""The one writer of `inferplane up --workers N`'s usage: it takes the spool segments the
workers hand off (common.usage_handoff), and those of workers that died, and writes their
records through a sink in batches.

    collector = SpoolCollector(spool, sink)   # sink(records, replayed): sync, run in a thread
    await collector.start()                   # every interval_ms: collect() in the background
    await collector.collect()                 # now: take what is ready and write it
    await collector.close()                   # at exit, once the workers stopped: a last collect

A segment's file goes once all its records are written. `replayed` is True for records that
may be in the sink already (a dead worker's open segment, whatever a failed batch held); the
SQL sink then skips those whose request-log row is there. A failing sink (the database is
down) is retried every interval; records wait on disk (at most `max_pending` are read into
memory meanwhile), so a collector killed meanwhile loses nothing either: the next one to start
adopts its segments.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.periodic import Periodic
from common.usage_record import UsageRecord
from common.usage_spool import UsageSpool

log = logging.getLogger("gateway.usage")

Sink = Callable[[list[UsageRecord], bool], None]


@dataclass
class _Segment:
    path: Path
    records: list[UsageRecord]   # those not written yet
    replayed: bool


class SpoolCollector:
    def __init__(self, spool: UsageSpool, sink: Sink, interval_ms: int = 250,
                 max_batch: int = 1000, max_attempts: int = 3,
                 max_pending: int = 100_000) -> None:
        if interval_ms <= 0 or max_batch < 1:
            raise ValueError("need interval_ms > 0 and max_batch >= 1")
        self.spool = spool
        self.sink = sink
        self.interval_s = interval_ms / 1000
        self.max_batch = max_batch
        self.max_attempts = max_attempts
        self.max_pending = max_pending   # records read into memory; the rest wait on disk
        self.written = 0
        self.failed_flushes = 0
        self._attempts = 0            # failed tries in a row
        self._segments: list[_Segment] = []
        self._lock = asyncio.Lock()
        self._timer = Periodic(self.collect, self.interval_s, "usage-collector")

    @property
    def pending(self) -> int:
        return sum(len(s.records) for s in self._segments)

    async def start(self) -> None:
        self._timer.start()

    async def close(self) -> None:
        await self._timer.stop()
        for _ in range(self.max_attempts):
            if await self.collect():
                return
        log.error("usage collector stopped with %d unwritten records; they stay in %s for "
                  "the next start", self.pending, self.spool.directory)

    async def collect(self) -> bool:
        """Take the segments ready now and write every record waiting; False when the sink
        failed (the rest waits for the next try)."""
        async with self._lock:
            self._take_ready()
            while self._segments:   # a backlog past max_pending is read as room is made
                if not await self._write_batch():
                    return False
                if not self._segments:
                    self._take_ready()
            return True

    def _take_ready(self) -> None:
        if self.pending >= self.max_pending:   # a long outage: what is on disk stays there
            return
        for path, records, replayed in self.spool.collect():
            if replayed:
                log.warning("usage spool: %d records of a process that died are written "
                            "again (%s)", len(records), path.name)
            if records:
                self._segments.append(_Segment(path, records, replayed))
            else:
                self.spool.release([path])
            if self.pending >= self.max_pending:
                return

    async def _write_batch(self) -> bool:
        replayed = self._segments[0].replayed
        batch: list[UsageRecord] = []
        taken: list[tuple[_Segment, int]] = []
        for segment in self._segments:
            if segment.replayed != replayed or len(batch) >= self.max_batch:
                break
            n = min(len(segment.records), self.max_batch - len(batch))
            batch.extend(segment.records[:n])
            taken.append((segment, n))
        try:
            await asyncio.to_thread(self.sink, batch, replayed)
        except Exception:
            # The transaction may have committed before the error reached here (a connection
            # lost at COMMIT): from now on these records are replayed, never written twice.
            for segment, _ in taken:
                segment.replayed = True
            self.failed_flushes += 1
            self._attempts += 1
            if self._attempts == 1:   # once per outage, not once per try
                log.exception("usage sink failed; %d records wait for it", self.pending)
            return False
        if self._attempts:
            log.warning("usage sink recovered after %d failed attempts", self._attempts)
        self._attempts = 0
        for segment, n in taken:
            del segment.records[:n]
        self.spool.release([s.path for s in self._segments if not s.records])
        self._segments = [s for s in self._segments if s.records]
        self.written += len(batch)
        return True


__all__ = ["SpoolCollector"]

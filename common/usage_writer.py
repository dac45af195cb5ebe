"""Usage accounting off the request path: records are queued and written in batches.

Call pattern::

    writer = UsageWriter(sink, flush_interval_ms=500, max_batch=200)
    await writer.start()                      # on gateway start-up
    state.usage_sinks.append(writer.record)  # per request: never blocks, never raises
    await writer.close()                      # on shutdown: flushes everything queued

`sink(records)` may be async, or sync (then it runs in a worker thread so a blocking database
call never stalls the event loop; the control plane passes one that inserts rows through
SQLAlchemy). A failing sink (the database is down) is retried on every flush for as long as
it fails: records wait in the queue, in order, and nothing is lost while the queue has room;
when it is full new records are dropped and counted in `dropped`. Only `close` gives up on a
batch, after `max_attempts` tries: the process is stopping and has nowhere to keep it.

With a `spool` (common.usage_spool.UsageSpool) every record is also appended to a file
before it is queued, and a segment goes only once all its records are written: a process
killed outright loses nothing, and one that gave up on a batch at `close` leaves it there.
`start` adopts the segments of processes that died and writes them first, through
`replay_sink` where one is given: a dead process may have written some of them already (it
died after its write and before it released the segment), and that sink skips those.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from typing import Awaitable, Callable, Generic, TypeVar, Union

log = logging.getLogger("gateway.usage")


R = TypeVar("R")
Sink = Callable[[list[R]], Union[None, Awaitable[None]]]


class UsageWriter(Generic[R]):
    """Batches any record type (the gateway's UsageRecord) towards one sink."""

    def __init__(self, sink: Sink, flush_interval_ms: int = 500, max_batch: int = 200,
                 max_queue: int = 100_000, max_attempts: int = 3, spool=None,
                 replay_sink: Sink | None = None) -> None:
        if flush_interval_ms <= 0 or max_batch < 1 or max_queue < max_batch:
            raise ValueError("need flush_interval_ms > 0, max_batch >= 1, max_queue >= max_batch")
        self.sink = sink
        self.replay_sink = replay_sink or sink
        self.flush_interval_s = flush_interval_ms / 1000
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_attempts = max_attempts
        self.written = 0
        self.dropped = 0
        self.failed_flushes = 0
        self._queue: deque[R] = deque()
        self._attempts = 0            # failed tries of the batch at the head of the queue
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.spool = spool
        # sealed spool segments, each released once `written` reaches its number
        self._sealed: list[tuple[int, list]] = []
        self._replaying = 0           # adopted records at the head of the queue

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def start(self) -> None:
        if self.spool is not None:
            self._adopt_orphans()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="usage-writer")

    def record(self, record: R) -> None:
        if self._closed or len(self._queue) >= self.max_queue:
            self.dropped += 1
            return
        if self.spool is not None:
            self.spool.append(record)
        self._queue.append(record)
        if len(self._queue) >= self.max_batch:
            self._wakeup.set()

    async def flush(self) -> None:
        """Write everything queued now (batch by batch), stopping at the first sink failure."""
        async with self._lock:
            if self.spool is not None and self._queue:
                self._seal()
            while self._queue:
                if not await self._write_batch():
                    return

    async def close(self) -> None:
        """Stop the timer and flush what is left (retrying failed batches up to max_attempts)."""
        self._closed = True
        self._wakeup.set()
        if self._task is not None:
            # Let a write in progress finish: cancelling it could leave a half-written batch.
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for _ in range(self.max_attempts):
            await self.flush()
            if not self._queue:
                return
        log.error("usage writer closed with %d unwritten records", len(self._queue))

    async def _run(self) -> None:
        while not self._closed:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.flush_interval_s)
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()
            await self.flush()

    async def _write_batch(self) -> bool:
        # Adopted records go in batches of their own, to the sink that skips written ones.
        size = min(self.max_batch, len(self._queue), self._replaying or self.max_batch)
        batch = [self._queue[i] for i in range(size)]
        sink = self.replay_sink if self._replaying else self.sink
        try:
            if inspect.iscoroutinefunction(sink):
                await sink(batch)
            else:
                result = await asyncio.to_thread(sink, batch)
                if inspect.isawaitable(result):
                    await result
        except Exception:
            return self._batch_failed(len(batch))
        self._replaying = max(0, self._replaying - len(batch))
        for _ in batch:
            self._queue.popleft()
        if self._attempts:
            log.warning("usage sink recovered after %d failed attempts", self._attempts)
        self._attempts = 0
        self.written += len(batch)
        self._release_written()
        return True

    # -- the spool ------------------------------------------------------------------------
    def _seal(self) -> None:
        """Every record queued so far is in the sealed segment: it goes once they are written."""
        segment = self.spool.seal()
        if segment:
            self._sealed.append((self.written + len(self._queue), segment))

    def _release_written(self) -> None:
        while self._sealed and self._sealed[0][0] <= self.written:
            self.spool.release(self._sealed.pop(0)[1])

    def _adopt_orphans(self) -> None:
        """A dead process's records go first, ahead of anything this one queues."""
        for path, records in self.spool.adopt_orphans():
            self._queue.extend(records)
            self._replaying += len(records)
            self._sealed.append((self.written + len(self._queue), [path]))
            log.warning("usage spool: %d records of a process that died are written again "
                        "(%s)", len(records), path.name)

    def _batch_failed(self, size: int) -> bool:
        self.failed_flushes += 1
        self._attempts += 1
        if self._attempts == 1:   # once per outage, not once per flush
            log.exception("usage sink failed; %d records wait for it", len(self._queue))
        if self._closed and self._attempts >= self.max_attempts:
            for _ in range(size):
                self._queue.popleft()
            self._replaying = max(0, self._replaying - size)
            self.dropped += size
            self._attempts = 0
        return False

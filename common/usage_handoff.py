"""A gateway worker's usage, handed to the process that writes it (the control plane of
`inferplane up --workers N`): the worker only appends records to its spool and marks a segment
ready every `interval_ms` (or every `max_segment` records); it never touches SQL.

    handoff = SpoolHandoff(UsageSpool(data_dir / "usage-spool"))
    await handoff.start()                     # on worker start-up
    state.usage_sinks.append(handoff.record)  # per request: one write(2)
    await handoff.close()                     # on shutdown: the last segment is handed off

The writer (common.usage_collector.SpoolCollector) takes the ready segments. Why not a thread
per worker writing SQL: a batch's SQL work competes for the worker's GIL with the event loop
serving requests, and costs several times what the same batch costs in a process of its own.
"""
from __future__ import annotations

from common.periodic import Periodic
from common.usage_record import UsageRecord
from common.usage_spool import UsageSpool


class SpoolHandoff:
    def __init__(self, spool: UsageSpool, interval_ms: int = 500,
                 max_segment: int = 1000) -> None:
        if interval_ms <= 0 or max_segment < 1:
            raise ValueError("need interval_ms > 0 and max_segment >= 1")
        self.spool = spool
        self.interval_s = interval_ms / 1000
        self.max_segment = max_segment
        self.handed_off = 0          # records in segments marked ready
        self._in_segment = 0
        self._timer = Periodic(self._tick, self.interval_s, "usage-handoff")

    def record(self, record: UsageRecord) -> None:
        self.spool.append(record)
        self._in_segment += 1
        if self._in_segment >= self.max_segment:
            self.hand_off()

    def hand_off(self) -> None:
        """The segment so far (if it holds any record) goes to the writer."""
        if self._in_segment:
            self.spool.hand_off()
            self.handed_off += self._in_segment
            self._in_segment = 0

    async def start(self) -> None:
        self._timer.start()

    async def close(self) -> None:
        await self._timer.stop()
        self.hand_off()

    async def _tick(self) -> None:
        self.hand_off()


__all__ = ["SpoolHandoff"]

"""A coroutine run every few seconds in a task of its own, until stopped.

    timer = Periodic(flush, interval_s=0.5, name="usage-handoff")   # flush: async, no args
    timer.start()          # needs a running loop; starting twice starts one task
    await timer.stop()     # a run in progress finishes first; no run starts after it

A run is never cancelled: one that writes to a database and is cut off after its commit
could not tell what it wrote, and the caller's last run after `stop` would write it again.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class Periodic:
    def __init__(self, run: Callable[[], Awaitable[object]], interval_s: float, name: str):
        self.run, self.interval_s, self.name = run, interval_s, name
        self._task: asyncio.Task | None = None
        self._stopping: asyncio.Event | None = None

    def start(self) -> None:
        if self._task is None:
            self._stopping = asyncio.Event()
            self._task = asyncio.create_task(self._loop(self._stopping), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping.set()
            await self._task
            self._task = None

    async def _loop(self, stopping: asyncio.Event) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval_s)
            if stopping.is_set():
                return
            await self.run()


__all__ = ["Periodic"]

"""Watching for a client that goes away, without a task per request.

    watch = DisconnectWatch(receive)          # in the task to cancel when the client leaves
    try:
        ...                                   # await the engine call / stream the answer
    except asyncio.CancelledError:
        if not watch.gone: raise              # cancelled from elsewhere (shutdown)
        asyncio.current_task().uncancel()     # the client left: answer 499
    finally:
        watch.stop()

Most answers end within milliseconds, before a disconnect could matter; a watcher task for
each (created, scheduled, its `receive()` call, cancelled) costs more than the rest of the
call stage. So registering costs a set insert: one sweeper task per event loop, running
while anything is registered, starts a watcher for each registration still there a full
WATCH_AFTER_S later. The watcher waits for `http.disconnect` and cancels the registering
task (when `should_cancel()` agrees), which only ever waits on an await when that happens.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Awaitable, Callable

WATCH_AFTER_S = 0.05


class _Sweeper:
    """One event loop's registrations not watched yet, and the task that starts watchers."""
    __slots__ = ("waiting", "task", "__weakref__")

    def __init__(self):
        self.waiting: set[DisconnectWatch] = set()
        self.task: asyncio.Task | None = None

    def add(self, watch: "DisconnectWatch") -> None:
        self.waiting.add(watch)
        if self.task is None:
            self.task = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        try:
            while self.waiting:
                seen = set(self.waiting)
                await asyncio.sleep(WATCH_AFTER_S)
                for watch in seen & self.waiting:
                    self.waiting.discard(watch)
                    watch.watcher = asyncio.ensure_future(watch._watch())
        finally:
            self.task = None


_sweepers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sweeper]" = \
    weakref.WeakKeyDictionary()


class DisconnectWatch:
    """Cancels the current task if the client disconnects (`gone` tells it was us)."""
    __slots__ = ("receive", "should_cancel", "task", "watcher", "gone", "sweeper")

    def __init__(self, receive: Callable[[], Awaitable[dict]],
                 should_cancel: Callable[[], bool] | None = None):
        self.receive = receive
        self.should_cancel = should_cancel
        self.task = asyncio.current_task()
        self.watcher: asyncio.Task | None = None
        self.gone = False
        loop = self.task.get_loop()
        self.sweeper = _sweepers.get(loop)
        if self.sweeper is None:
            self.sweeper = _sweepers[loop] = _Sweeper()
        self.sweeper.add(self)

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if self.should_cancel is None or self.should_cancel():
            self.gone = True
            self.task.cancel()

    def stop(self) -> None:
        self.sweeper.waiting.discard(self)
        if self.watcher is not None and not self.watcher.done():
            self.watcher.cancel()

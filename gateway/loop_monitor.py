"""Event-loop health of a gateway process: how late the loop runs callbacks, and how many
asyncio tasks are alive. A growing task count is a leak (a stream or shadow copy that never
ends); lag is time every in-flight request waits on something blocking the loop.

    monitor = LoopMonitor(registry)
    task = asyncio.create_task(monitor.run())     # samples every `interval_s` until cancelled
"""
from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Gauge


class LoopMonitor:
    def __init__(self, registry: CollectorRegistry, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.lag = Gauge("inferplane_event_loop_lag_seconds",
                         "Worst lateness of a timer callback on the gateway's event loop since "
                         "the previous scrape", registry=registry)
        self.tasks = Gauge("inferplane_event_loop_tasks", "asyncio tasks alive in the gateway",
                           registry=registry)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worst_lag = 0.0
        # Both are read at scrape time: a spike between two scrapes is not averaged away.
        self.tasks.set_function(self._task_count)
        self.lag.set_function(self._take_worst_lag)

    def _task_count(self) -> float:
        loop = self._loop
        return float(len(asyncio.all_tasks(loop))) if loop is not None else 0.0

    def _take_worst_lag(self) -> float:
        worst, self._worst_lag = self._worst_lag, 0.0
        return worst

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, time.perf_counter() - started - self.interval_s)
            self._worst_lag = max(self._worst_lag, lag)

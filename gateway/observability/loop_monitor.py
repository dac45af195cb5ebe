"""Event-loop health of a gateway process: how late the loop runs callbacks, and how many
asyncio tasks are alive. A growing task count is a leak (a stream or shadow copy that never
ends); lag is time every in-flight request waits on something blocking the loop.

    monitor = LoopMonitor(registry)
    task = asyncio.create_task(monitor.run())     # samples every `interval_s` until cancelled
    LoopMonitor(None, shared=True)                # worker processes: values in the shared files

With workers (gateway.observability.metrics, PROMETHEUS_MULTIPROC_DIR) a scrape is answered by one worker and
cannot read or reset the others' values at scrape time: each worker then writes its task count
(summed over live workers) and its worst lag over the last `SHARED_LAG_WINDOW_S` to
`2 * SHARED_LAG_WINDOW_S` (the worst live worker's) on every sample.
"""
from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Gauge

from common.metric_names import Metric

SHARED_LAG_WINDOW_S = 15.0


class LoopMonitor:
    def __init__(self, registry: CollectorRegistry | None, interval_s: float = 0.5,
                 shared: bool = False) -> None:
        self.interval_s = interval_s
        self.shared = shared
        self.lag = Gauge(Metric.EVENT_LOOP_LAG,
                         "Worst lateness of a timer callback on the gateway's event loop since "
                         "the previous scrape", registry=registry,
                         multiprocess_mode="livemax")
        self.tasks = Gauge(Metric.EVENT_LOOP_TASKS, "asyncio tasks alive in the gateway",
                           registry=registry, multiprocess_mode="livesum")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worst_lag = 0.0
        self._window = (0.0, 0.0, time.monotonic())   # shared: worst of previous, current; start
        if not shared:   # both read at scrape time: a spike between scrapes is not averaged away
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
            if self.shared:
                self._publish(lag)

    def _publish(self, lag: float) -> None:
        previous, current, start = self._window
        now = time.monotonic()
        if now - start >= SHARED_LAG_WINDOW_S:
            previous, current, start = current, 0.0, now
        self._window = (previous, max(current, lag), start)
        self.lag.set(max(self._window[:2]))
        self.tasks.set(self._task_count())

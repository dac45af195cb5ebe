"""The gateway's event-loop gauges: live task count, and the worst lag since the last scrape."""
from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from common.metric_names import Metric
from gateway.observability.loop_monitor import LoopMonitor


def value(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name)


async def test_counts_tasks_and_reports_the_worst_lag_once():
    registry = CollectorRegistry()
    monitor = LoopMonitor(registry, interval_s=0.02)
    runner = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    idle = value(registry, Metric.EVENT_LOOP_TASKS)
    sleepers = [asyncio.create_task(asyncio.sleep(1)) for _ in range(5)]
    await asyncio.sleep(0)
    assert value(registry, Metric.EVENT_LOOP_TASKS) == idle + 5
    value(registry, Metric.EVENT_LOOP_LAG)      # forget start-up lag
    time.sleep(0.15)                                          # block the loop: ~0.13 s late
    await asyncio.sleep(0.05)
    assert value(registry, Metric.EVENT_LOOP_LAG) >= 0.1
    assert value(registry, Metric.EVENT_LOOP_LAG) < 0.1   # reset by the read
    for task in [*sleepers, runner]:
        task.cancel()
    await asyncio.gather(*sleepers, runner, return_exceptions=True)


async def test_shared_mode_publishes_each_sample_and_keeps_the_worst_lag_for_a_window():
    # Worker processes: another worker answers the scrape, so values are written, not read.
    registry = CollectorRegistry()
    monitor = LoopMonitor(registry, interval_s=0.02, shared=True)
    runner = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    assert value(registry, Metric.EVENT_LOOP_TASKS) >= 1
    time.sleep(0.15)                                          # block the loop: ~0.13 s late
    await asyncio.sleep(0.05)
    assert value(registry, Metric.EVENT_LOOP_LAG) >= 0.1
    assert value(registry, Metric.EVENT_LOOP_LAG) >= 0.1   # reads reset nothing
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)

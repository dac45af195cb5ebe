"""Continuous batching for an embedding model: inputs of concurrent requests share padded
forward passes, run one at a time on a worker thread so the event loop keeps serving.

    batcher = EmbeddingBatcher(embedder, max_batch_tokens=16384)
    batcher.start()                                  # inside the running loop
    vectors = await batcher.embed([[101, 7592, 102], ...])   # np.ndarray [n, dimensions]
    await batcher.close()
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class _Item:
    ids: list[int]
    future: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)


def plan_batches(items: list, max_batch_tokens: int, max_batch_size: int) -> list[list]:
    """Group items (with .ids) by length so padding is small: each batch's padded size
    (rows x longest) stays within max_batch_tokens; one over-long item forms its own batch."""
    batches, current, longest = [], [], 0
    for item in sorted(items, key=lambda i: len(i.ids)):
        grown = max(longest, len(item.ids))
        if current and (grown * (len(current) + 1) > max_batch_tokens
                        or len(current) >= max_batch_size):
            batches.append(current)
            current, grown = [], len(item.ids)
        current.append(item)
        longest = grown
    if current:
        batches.append(current)
    return batches


class EmbeddingBatcher:
    def __init__(self, embedder, max_batch_tokens: int = 16384, max_batch_size: int = 256,
                 metrics=None):
        self.embedder, self.metrics = embedder, metrics
        self.max_batch_tokens, self.max_batch_size = max_batch_tokens, max_batch_size
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="embed")
        self._task: asyncio.Task | None = None
        self.running = 0  # inputs in the forward pass now

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    async def embed(self, inputs: list[list[int]]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        items = [_Item(ids, loop.create_future()) for ids in inputs]
        for item in items:
            self._queue.put_nowait(item)
        rows = await asyncio.gather(*(i.future for i in items))
        return np.stack(rows)

    def _drain(self, first: _Item) -> list[_Item]:
        items, tokens = [first], len(first.ids)
        # Take what is queued now, up to a few batches' worth: later arrivals wait one pass.
        while not self._queue.empty() and tokens < 4 * self.max_batch_tokens:
            item = self._queue.get_nowait()
            if not item.future.done():  # a cancelled request's inputs are skipped
                items.append(item)
                tokens += len(item.ids)
        return items

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            if first.future.done():
                continue
            for batch in plan_batches(self._drain(first), self.max_batch_tokens,
                                      self.max_batch_size):
                await self._run(loop, batch)

    async def _run(self, loop, batch: list[_Item]) -> None:
        self.running = len(batch)
        try:
            vectors = await loop.run_in_executor(self._pool, self.embedder.embed,
                                                 [i.ids for i in batch])
        except Exception as exc:  # a failed pass fails its own requests, not the worker
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        finally:
            self.running = 0
        rows = vectors.numpy()
        for item, row in zip(batch, rows):
            if not item.future.done():
                item.future.set_result(row)
        if self.metrics is not None:
            self.metrics.batch_done(len(batch), sum(len(i.ids) for i in batch))

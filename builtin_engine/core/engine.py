"""AsyncEngine: the step loop on its own thread, streaming outputs to asyncio consumers.

The loop thread owns the LLMEngine. Other threads never touch it directly: adds and aborts go
through an inbox applied between steps, outputs come back through loop.call_soon_threadsafe
into one asyncio.Queue per request. When there is no work the thread sleeps on an Event.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.executor import Executor
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.request import Request, RequestOutput
from builtin_engine.core.sampling_params import SamplingParams

__all__ = ["AsyncEngine", "LLMEngine", "RequestOutput"]
log = logging.getLogger(__name__)
_IDLE_POLL_S = 0.005  # nap when a step made no progress, so the thread never spins


class EngineShutDown(RuntimeError):
    pass


class AsyncEngine:
    def __init__(self, config: EngineConfig, executor: Executor, tokenizer=None) -> None:
        self.engine = LLMEngine(config, executor, tokenizer)
        self.config = config
        self._inbox: deque[tuple[str, object]] = deque()
        self._wake = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._drain_deadline = float("inf")

    @property
    def metrics(self):
        return self.engine.metrics

    @property
    def metrics_registry(self):
        """The engine's own CollectorRegistry, for the /metrics endpoint."""
        return self.engine.metrics.registry

    @property
    def max_model_len(self) -> int:
        """The model context, capped by what the KV cache can hold."""
        return self.engine.max_model_len

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    # ---- consumer side --------------------------------------------------------------------
    async def generate(self, request_id: str, prompt_token_ids: list[int],
                       params: SamplingParams, priority: int = 0,
                       extra_key: bytes | None = None,
                       lora: str | None = None) -> AsyncIterator[RequestOutput]:
        if self._stopping:
            raise EngineShutDown("the engine is shutting down")
        if request_id in self._streams:
            raise ValueError(f"duplicate request id {request_id!r}")
        self.start()
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), queue)
        self._submit("add", Request(request_id, prompt_token_ids, params, priority,
                                    extra_key=extra_key, lora=lora))
        finished = False
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished:  # the consumer went away (disconnect, cancel): free its blocks
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        self._submit("abort", request_id)

    async def shutdown(self, drain_timeout_s: float = 30.0) -> None:
        """Stop taking requests, let running ones finish for up to drain_timeout_s, then
        abort the rest and stop the thread."""
        self._stopping = True
        self._drain_deadline = time.monotonic() + max(drain_timeout_s, 0.0)
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, drain_timeout_s + 30.0)

    def stats(self) -> dict:
        stats = self.engine.stats()
        stats["shutting_down"] = self._stopping
        return stats

    def kv_summary(self, max_hashes: int = 4096) -> dict:
        return self.engine.kv_summary(max_hashes)

    def _submit(self, kind: str, item: object) -> None:
        self._inbox.append((kind, item))
        self._wake.set()

    # ---- loop thread ----------------------------------------------------------------------
    def _run(self) -> None:
        engine = self.engine
        enter = getattr(engine.executor, "enter_step_thread", None)
        if enter is not None:
            enter()
        while True:
            self._wake.clear()  # before reading the inbox, so a later submit wakes us
            self._apply_inbox()
            if self._stopping and time.monotonic() >= self._drain_deadline:
                self._dispatch(engine.abort_all("abort", "the engine shut down"))
            if not engine.has_unfinished():
                if self._stopping:
                    break
                self._wake.wait()
                continue
            try:
                outputs = engine.step()
            except Exception as exc:  # a scheduler bug must not leave consumers hanging
                log.exception("engine step failed")
                outputs = engine.abort_all("error", f"engine step failed: {exc!r}")
            self._dispatch(outputs)
            if not outputs and not engine.scheduler.running:
                self._wake.wait(_IDLE_POLL_S)
        self._reject_leftovers()

    def _apply_inbox(self) -> None:
        engine = self.engine
        while self._inbox:
            kind, item = self._inbox.popleft()
            if kind == "add":
                try:
                    engine.scheduler.add_request(item)
                except ValueError as exc:  # duplicate id: answer that stream, keep going
                    item.finish("error", str(exc))
                    self._dispatch([RequestOutput(item.request_id, [], True, "error",
                                                  item.num_prompt_tokens, 0, str(exc))])
            else:
                engine.abort_request(item)

    def _reject_leftovers(self) -> None:
        while self._inbox:
            kind, item = self._inbox.popleft()
            if kind == "add":
                self._dispatch([RequestOutput(item.request_id, [], True, "abort",
                                              item.num_prompt_tokens, 0,
                                              "the engine shut down")])

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        # One wake-up per consumer event loop per step, not one per token.
        batches: dict[asyncio.AbstractEventLoop, list] = {}
        for out in outputs:
            entry = self._streams.get(out.request_id)
            if entry is not None:  # the consumer removes its entry once it has read the end
                batches.setdefault(entry[0], []).append((entry[1], out))
        for loop, items in batches.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the consumer's event loop is closed
                pass


def _deliver(items: list[tuple[asyncio.Queue, RequestOutput]]) -> None:
    for queue, out in items:
        queue.put_nowait(out)

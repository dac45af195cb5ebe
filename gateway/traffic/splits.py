"""Traffic splits on model aliases: canary weights, sticky A/B assignment, shadow copies.

Assignment::

    version = choose({"v1": 90, "v2": 10}, sticky_key=user or session_id, salt=alias)

With a sticky key the choice is a pure function of (salt, key, weights): xxh64 of the key maps
to a point in [0, 1), versions own consecutive ranges in name order, so the same user gets the
same version in every gateway process. Raising a canary's weight only moves users whose point
falls in the grown range. Without a key the choice is random by weight.

Shadow::

    mirror = ShadowMirror(max_concurrency=8, on_record=metrics.shadow_record)
    handle = mirror.mirror(lambda: call_backend(shadow_version, body), model, "v2")
    ...primary request runs as usual...
    if handle: handle.set_primary(primary_text, primary_latency_s)   # None text if it failed

`mirror` never awaits: the copy runs as a task, is dropped (not queued) when `max_concurrency`
copies are already running, and its errors are recorded, never raised.
"""
from __future__ import annotations

import asyncio
import difflib
import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import xxhash

log = logging.getLogger("gateway.splits")
_SIMILARITY_MAX_CHARS = 4000      # difflib is quadratic; compare a bounded prefix


def sticky_point(key: str, salt: str = "") -> float:
    """Stable point in [0, 1) for a key, identical across processes and hosts."""
    return xxhash.xxh64_intdigest(f"{salt}\x00{key}".encode()) / 2.0**64


def choose(weights: Mapping[str, float], sticky_key: str | None = None, salt: str = "",
           rng: random.Random | None = None) -> str:
    """Pick a version by weight; sticky when a key is given."""
    items = sorted((v, w) for v, w in weights.items() if w > 0)
    if not items:
        raise ValueError("a split needs at least one version with positive weight")
    total = sum(w for _, w in items)
    point = sticky_point(sticky_key, salt) if sticky_key else (rng or random).random()
    target = point * total
    running = 0.0
    for version, weight in items:
        running += weight
        if target < running:
            return version
    return items[-1][0]


def text_similarity(a: str, b: str, method: str = "ratio") -> float:
    """1.0 = identical. "ratio": difflib sequence ratio on a bounded prefix; "jaccard": word-set
    overlap (cheap, order-blind)."""
    if method == "jaccard":
        wa, wb = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
        if not wa and not wb:
            return 1.0
        return len(wa & wb) / len(wa | wb)
    if method != "ratio":
        raise ValueError(f"unknown similarity method {method!r}")
    a, b = a[:_SIMILARITY_MAX_CHARS], b[:_SIMILARITY_MAX_CHARS]
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass(frozen=True)
class ShadowRecord:
    model: str
    version: str
    shadow_latency_s: float
    shadow_chars: int
    primary_latency_s: float | None
    primary_chars: int | None
    similarity: float | None        # None when either side has no text
    error: str | None
    outcome: str = "ok"             # ok | error | timeout
    shadow_ttft_s: float | None = None


@dataclass(frozen=True)
class ShadowReply:
    """What a shadow copy produced; a factory may return this instead of plain text."""
    text: str
    ttft_s: float | None = None


class ShadowHandle:
    """Lets the primary path hand over its result for comparison; it never waits on the shadow."""

    def __init__(self) -> None:
        self._primary: asyncio.Future = asyncio.get_running_loop().create_future()

    def set_primary(self, text: str | None, latency_s: float) -> None:
        if not self._primary.done():
            self._primary.set_result((text, latency_s))


class ShadowMirror:
    def __init__(self, max_concurrency: int = 8, timeout_s: float = 60.0,
                 on_record: Callable[[ShadowRecord], None] | None = None,
                 similarity: str = "ratio") -> None:
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.on_record = on_record
        self.similarity = similarity
        self.dropped = 0
        self.failed = 0
        self._tasks: set[asyncio.Task] = set()

    @property
    def running(self) -> int:
        return len(self._tasks)

    def mirror(self, coro_factory: Callable[[], Awaitable["str | ShadowReply"]], model: str = "",
               version: str = "") -> ShadowHandle | None:
        """Start the shadow copy; None when saturated (the copy is dropped). The factory is only
        called when the copy runs, and must return the shadow's response text (or a ShadowReply)."""
        if len(self._tasks) >= self.max_concurrency:
            self.dropped += 1
            return None
        handle = ShadowHandle()
        task = asyncio.get_running_loop().create_task(
            self._run(coro_factory, handle, model, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle

    async def _run(self, coro_factory: Callable[[], Awaitable["str | ShadowReply"]], handle: ShadowHandle,
                   model: str, version: str) -> None:
        started = time.monotonic()
        text, ttft, error, outcome = None, None, None, "ok"
        try:
            async with asyncio.timeout(self.timeout_s):
                reply = await coro_factory()
            text, ttft = (reply.text, reply.ttft_s) if isinstance(reply, ShadowReply) \
                else (reply, None)
        except Exception as exc:        # the shadow's failure is data, not an error upstream
            self.failed += 1
            error = f"{type(exc).__name__}: {exc}"
            outcome = "timeout" if isinstance(exc, TimeoutError) else "error"
        latency = time.monotonic() - started
        primary_text, primary_latency = await self._primary_result(handle, started)
        self._record(ShadowRecord(
            model, version, latency, len(text or ""), primary_latency,
            None if primary_text is None else len(primary_text),
            self._similarity(primary_text, text), error, outcome, ttft))

    async def _primary_result(self, handle: ShadowHandle, started: float):
        remaining = max(0.0, self.timeout_s - (time.monotonic() - started))
        try:
            return await asyncio.wait_for(asyncio.shield(handle._primary), remaining)
        except asyncio.TimeoutError:
            return None, None

    def _similarity(self, primary: str | None, shadow: str | None) -> float | None:
        if primary is None or shadow is None:
            return None
        return text_similarity(primary, shadow, self.similarity)

    def _record(self, record: ShadowRecord) -> None:
        if self.on_record is None:
            return
        try:
            self.on_record(record)
        except Exception:
            log.exception("shadow record callback failed")

    async def close(self, timeout_s: float = 5.0) -> None:
        """Wait briefly for running copies, then cancel the rest (shutdown)."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

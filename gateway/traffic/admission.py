"""Admission queues: per model pool, weighted fair queueing in tokens, per-backend in-flight caps.

Each waiting request belongs to a flow (tenant, priority class). A flow's virtual finish tag
advances by cost / weight, where cost is the request's tokens (prompt + max_tokens) and weight
its class weight (high 8, standard 4, batch 1). The free slot always goes to the smallest finish
tag (self-clocked fair queueing), so throughput is shared in tokens: a tenant sending long
prompts pays for them and cannot starve others, and within a class tenants share equally.

Call pattern::

    pool = admission.pool("smollm2")
    pool.set_backends({"b1": 8, "b2": 8})                 # from the snapshot: in-flight caps
    try:
        async with pool.admit(tenant=key.team, priority=Priority.STANDARD, cost=tokens) as ticket:
            backend = router.pick([b for b in candidates if pool.has_room(b.id)])
            ticket.bind(backend.id)                       # counts against that backend's cap
            ...                                           # serve; the slot is released on exit
    # QueueFull (429) and QueueTimeout (503) are InferplaneErrors with Retry-After: let them
    # reach the edge handler.

    ticket = await pool.acquire(tenant, priority, tokens)   # a holder that releases itself
    ...
    pool.release(ticket)                                    # exactly once, whatever happened

A granted ticket guarantees some backend has room (tickets never outnumber the summed caps).
A waiter whose task is cancelled (client gone) leaves the queue; a granted slot is released
when the `async with` exits, whatever the reason.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Mapping

from common.error_codes import ErrorCode
from common.errors import InferplaneError
from common.vocabulary import Priority

PRIORITY_WEIGHTS: dict[str, float] = {Priority.HIGH: 8.0, Priority.STANDARD: 4.0,
                                      Priority.BATCH: 1.0}


class AdmissionRejected(InferplaneError):
    """No slot for this request; `retry_after` (seconds) is also sent as Retry-After."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)


class QueueFull(AdmissionRejected):
    """The pool's queue is at max_queue: 429 with Retry-After."""

    status, code = 429, ErrorCode.QUEUE_FULL


class QueueTimeout(AdmissionRejected):
    """Waited queue_timeout_s without a slot: 503 with Retry-After."""

    status, code = 503, ErrorCode.QUEUE_TIMEOUT


@dataclass
class Ticket:
    """A granted slot. `bind` records which backend serves it (call again to move on retry)."""
    pool: "AdmissionPool"
    tenant: str
    priority: str
    cost: int
    enqueued_at: float
    granted_at: float
    backend: str | None = None

    @property
    def wait_s(self) -> float:
        return self.granted_at - self.enqueued_at

    def bind(self, backend_id: str) -> None:
        self.pool._bind(self, backend_id)


@dataclass(order=True)
class _Waiter:
    finish: float
    seq: int
    start: float = field(compare=False)
    flow: tuple[str, str] = field(compare=False)
    cost: int = field(compare=False)
    enqueued_at: float = field(compare=False)
    future: asyncio.Future = field(compare=False)
    state: str = field(default="queued", compare=False)   # queued | granted | removed


class AdmissionPool:
    """One model's queue. `slots` caps in-flight requests when no backend caps are set
    (None = unlimited); once `set_backends` is called, capacity is the sum of the caps."""

    def __init__(self, name: str, *, max_queue: int = 1000, queue_timeout_s: float = 30.0,
                 weights: Mapping[str, float] = PRIORITY_WEIGHTS, slots: int | None = None,
                 on_depth: Callable[[str, int], None] | None = None,
                 on_wait: Callable[[str, str, float], None] | None = None,
                 on_reject: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_queue < 0 or queue_timeout_s <= 0 or any(w <= 0 for w in weights.values()):
            raise ValueError("need max_queue >= 0, queue_timeout_s > 0 and positive weights")
        self.name = name
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.weights = dict(weights)
        self.slots = slots
        self.on_depth, self.on_wait, self.on_reject = on_depth, on_wait, on_reject
        self.clock = clock
        self._caps: dict[str, int] | None = None
        self._bound: dict[str, int] = {}
        self._granted = 0
        self._heap: list[_Waiter] = []
        self._depth_by_class: dict[str, int] = {p: 0 for p in self.weights}
        self._last_finish: dict[tuple[str, str], float] = {}
        self._virtual_time = 0.0
        self._seq = itertools.count()
        self._hold_ewma_s = 1.0

    # ---- state for metrics and routing -------------------------------------------------------
    @property
    def depth(self) -> int:
        return sum(self._depth_by_class.values())

    def depth_by_priority(self) -> dict[str, int]:
        return dict(self._depth_by_class)

    @property
    def in_flight(self) -> int:
        return self._granted

    @property
    def capacity(self) -> float:
        if self._caps is not None:
            return sum(self._caps.values())
        return math.inf if self.slots is None else self.slots

    def in_flight_by_backend(self) -> dict[str, int]:
        return dict(self._bound)

    def has_room(self, backend_id: str) -> bool:
        if self._caps is None:
            return True
        return self._bound.get(backend_id, 0) < self._caps.get(backend_id, 0)

    def set_backends(self, caps: Mapping[str, int]) -> None:
        """Replace the per-backend in-flight caps (e.g. on a new routing snapshot)."""
        self._caps = {b: max(0, int(c)) for b, c in caps.items()}
        self.wake()

    def wake(self) -> None:
        """Grant queued waiters if capacity allows (after caps change)."""
        self._dispatch()

    # ---- admission ---------------------------------------------------------------------------
    @asynccontextmanager
    async def admit(self, tenant: str, priority: str = Priority.STANDARD, cost: int = 1,
                    timeout_s: float | None = None) -> AsyncIterator[Ticket]:
        ticket = await self.acquire(tenant, priority, cost, timeout_s)
        try:
            yield ticket
        finally:
            self.release(ticket)

    async def acquire(self, tenant: str, priority: str = Priority.STANDARD, cost: int = 1,
                      timeout_s: float | None = None) -> Ticket:
        """`admit` for a holder that releases on its own: every ticket acquired must be
        `release`d exactly once (the request path's RequestScope does it at close)."""
        if priority not in self.weights:
            raise ValueError(f"unknown priority {priority!r}; expected one of {list(self.weights)}")
        if self.depth >= self.max_queue and self._granted >= self.capacity:
            self._reject("queue_full")
            raise QueueFull(f"too many queued requests for '{self.name}'", self.retry_after())
        cost = max(1, int(cost))
        if self.depth == 0 and self._granted < self.capacity:
            return self._grant_now(tenant, priority, cost)
        waiter = self._enqueue(tenant, priority, cost)
        self._dispatch()
        try:
            async with asyncio.timeout(timeout_s or self.queue_timeout_s):
                await waiter.future
        except TimeoutError:
            if waiter.state != "granted":
                self._remove(waiter)
                self._reject("queue_timeout")
                raise QueueTimeout(f"timed out waiting for capacity on '{self.name}'",
                                   self.retry_after()) from None
        except BaseException:
            # Client gone (cancelled) while waiting, or granted at that very moment.
            if waiter.state == "granted":
                self._release_slot(None)
            self._remove(waiter)
            raise
        return Ticket(self, tenant, priority, waiter.cost, waiter.enqueued_at, self.clock())

    def retry_after(self) -> float:
        """Rough time until a newly queued request would be served, in whole seconds."""
        per_slot = self._hold_ewma_s * (self.depth + 1) / max(1.0, min(self.capacity, 1e9))
        return float(min(60, max(1, math.ceil(per_slot))))

    # ---- weighted fair queue -----------------------------------------------------------------
    def _tags(self, flow: tuple[str, str], cost: int) -> tuple[float, float]:
        start = max(self._virtual_time, self._last_finish.get(flow, 0.0))
        finish = start + cost / self.weights[flow[1]]
        self._last_finish[flow] = finish
        return start, finish

    def _grant_now(self, tenant: str, priority: str, cost: int) -> Ticket:
        # Nobody waits and a slot is free: no queue round trip, but the flow is still charged.
        _, self._virtual_time = self._tags((tenant, priority), cost)
        self._granted += 1
        now = self.clock()
        if self.on_wait:
            self.on_wait(self.name, priority, 0.0)
        return Ticket(self, tenant, priority, cost, now, now)

    def _enqueue(self, tenant: str, priority: str, cost: int) -> _Waiter:
        flow = (tenant, priority)
        start, finish = self._tags(flow, cost)
        waiter = _Waiter(finish, next(self._seq), start, flow, cost, self.clock(),
                         asyncio.get_running_loop().create_future())
        heapq.heappush(self._heap, waiter)
        self._depth_changed(priority, +1)
        return waiter

    def _remove(self, waiter: _Waiter) -> None:
        if waiter.state != "queued":
            return
        waiter.state = "removed"
        self._depth_changed(waiter.flow[1], -1)
        # If it was its flow's latest request, give the flow its virtual time back.
        if self._last_finish.get(waiter.flow) == waiter.finish:
            self._last_finish[waiter.flow] = waiter.start

    def _dispatch(self) -> None:
        while self._heap and self._granted < self.capacity:
            waiter = heapq.heappop(self._heap)
            if waiter.state != "queued" or waiter.future.done():
                self._remove(waiter)
                continue
            waiter.state = "granted"
            self._granted += 1
            self._virtual_time = waiter.finish
            self._depth_changed(waiter.flow[1], -1)
            waiter.future.set_result(None)
            if self.on_wait:
                self.on_wait(self.name, waiter.flow[1], self.clock() - waiter.enqueued_at)
        if not self._heap and len(self._last_finish) > 1024:
            self._forget_idle_flows()

    def _forget_idle_flows(self) -> None:
        # A flow whose tag is behind virtual time behaves exactly like a new flow.
        self._last_finish = {f: t for f, t in self._last_finish.items()
                             if t > self._virtual_time}

    # ---- slots ---------------------------------------------------------------------------------
    def _bind(self, ticket: Ticket, backend_id: str) -> None:
        if ticket.backend is not None:
            self._bound[ticket.backend] -= 1
        ticket.backend = backend_id
        self._bound[backend_id] = self._bound.get(backend_id, 0) + 1

    def release(self, ticket: Ticket) -> None:
        held = self.clock() - ticket.granted_at
        self._hold_ewma_s = 0.9 * self._hold_ewma_s + 0.1 * held
        self._release_slot(ticket.backend)

    def _release_slot(self, backend_id: str | None) -> None:
        self._granted -= 1
        if backend_id is not None:
            self._bound[backend_id] -= 1
        self._dispatch()

    def _depth_changed(self, priority: str, delta: int) -> None:
        self._depth_by_class[priority] += delta
        if self.on_depth:
            self.on_depth(self.name, self.depth)

    def _reject(self, reason: str) -> None:
        if self.on_reject:
            self.on_reject(self.name, reason)


class AdmissionController:
    """One AdmissionPool per model, created on first use with shared settings and callbacks."""

    def __init__(self, **pool_kwargs) -> None:
        self.pool_kwargs = pool_kwargs
        self.pools: dict[str, AdmissionPool] = {}

    def pool(self, model: str) -> AdmissionPool:
        if model not in self.pools:
            self.pools[model] = AdmissionPool(model, **self.pool_kwargs)
        return self.pools[model]

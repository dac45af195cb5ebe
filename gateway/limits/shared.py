"""One rate-limit and budget store for the worker processes of one gateway (no Redis).

`inferplane gateway --workers N` without a `redis_url` runs the in-process counters
(WindowStore, InMemorySpendTracker) once, in the supervising process, behind a unix socket;
each worker's limiter and spend tracker send every step there. The owner serves one message
at a time on one event loop, so an admission checks and charges all counters atomically
across workers: N workers enforce one limit exactly, as one process does.

    owner = LimitsOwner(path)                  # supervisor, before forking the workers
    await owner.start(); ...; await owner.close()
    limiter = SharedRateLimiter(path)          # in a worker (create_rate_limiter picks these
    spend = SharedSpendTracker(path)           # when INFERPLANE_LIMITS_SOCKET is set)

Wire format: one orjson array per line, `[id, op, *args]` -> `[id, result]`, pipelined on
one connection per worker and per store. Times travel with each request (now_ms, the hold
expiry), so the store runs on the workers' clocks exactly as the in-process classes do.

A TPM correction after a request (`adjust`) needs no answer: it is sent one-way (`[null, op,
*args]`, no reply) and leaves with the worker's next call on that connection, or within
ONE_WAY_DELAY_S when none comes. Under load that halves the messages a request costs the
store's process (each wakes it); the worker's own later calls see the correction first (one
connection, in order), other workers' within ONE_WAY_DELAY_S, as with any in-flight request.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time

import orjson

from common.workers import SharedStore
from gateway.limits.base import RateLimiter, now_ms_from
from gateway.limits.budget import (DEFAULT_HOLD_TTL_S, Budget, BudgetHold, InMemorySpendTracker,
                                   SpendTracker)
from gateway.limits.budget import Counter as SpendKey
from gateway.limits.types import BUCKET_S, WINDOW_S, Counter
from gateway.limits.window import RawResult, WindowStore

log = logging.getLogger("inferplane.gateway")
SOCKET_ENV = "INFERPLANE_LIMITS_SOCKET"
STREAM_LIMIT = 1 << 20   # a request names a few counters; a line this long is a broken peer
ONE_WAY_DELAY_S = 0.02   # the longest a one-way message waits for a call to carry it


class _Settled(InMemorySpendTracker):
    """The owner's spend store: a hold is given by (keys, id, estimate), not a BudgetHold."""

    def reserve_raw(self, keys: list, hold_id: str, estimate: float, expires_at: float):
        counters = [SpendKey(k, 0, floor, Budget("", "", limit), None) for k, floor, limit in keys]
        hold = BudgetHold(tuple(k for k, _, _ in keys), estimate, hold_id=hold_id)
        return _sync(self._reserve(counters, hold, expires_at))

    def settle_raw(self, keys: list, hold_id: str, usd: float) -> None:
        _sync(self._settle(BudgetHold(tuple(keys), 0.0, hold_id=hold_id), usd))

    def get_raw(self, key: str):
        return _sync(self._get(key))


def _sync(coro):
    """Run a coroutine that never awaits (the in-memory stores) to its result, inline."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an in-memory store awaited")


def limits_store() -> SharedStore:
    """The store `common.workers.serve_workers` serves to its workers when there is no Redis."""
    return SharedStore(SOCKET_ENV, LimitsOwner)


class LimitsOwner:
    """The store itself, served on a unix socket at `path` (in the supervising process)."""

    def __init__(self, path: str, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S,
                 hold_ttl_s: float = DEFAULT_HOLD_TTL_S) -> None:
        self.path = path
        self.window = WindowStore(int(window_s * 1000), int(bucket_s * 1000))
        self.spend = _Settled(hold_ttl_s=hold_ttl_s)
        self._server: asyncio.AbstractServer | None = None

    async def start(self, sock=None) -> None:
        """Serve on `path`, or on `sock` when the caller bound it already (before a fork)."""
        self._server = await asyncio.start_unix_server(
            self._serve, None if sock is not None else self.path, sock=sock, limit=STREAM_LIMIT)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def handle(self, op: str, args: list):
        if op == "acquire":
            counters, costs, now_ms = args
            raw = self.window.acquire([Counter(*c) for c in counters], costs, now_ms)
            return [raw.status, raw.tripped_index, raw.retry_ms, raw.bucket_ms, raw.used,
                    raw.reset_ms]
        if op == "adjust":
            self.window.adjust(*args)
            return None
        if op == "reserve":
            return self.spend.reserve_raw(*args)
        if op == "settle":
            return self.spend.settle_raw(*args)
        if op == "get":
            return self.spend.get_raw(*args)
        raise ValueError(f"unknown limits operation {op!r}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                call_id, op, *args = orjson.loads(line)
                try:
                    reply = [call_id, self.handle(op, args)]
                except Exception as exc:   # a bad call must not stop the store for everyone
                    log.exception("limits store: %s failed", op)
                    reply = [call_id, None, repr(exc)]
                if call_id is not None:   # one-way messages get no reply
                    writer.write(orjson.dumps(reply) + b"\n")
        except (ConnectionError, asyncio.IncompleteReadError, orjson.JSONDecodeError):
            pass
        finally:
            writer.close()


class StoreClient:
    """One pipelined connection to the owner; `await call(op, *args)` is its reply,
    `send(op, *args)` a one-way message that leaves with the next call (module doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Lock | None = None
        self._outbox: list[bytes] = []   # one-way lines not sent yet
        self._flush: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task] = set()   # the loop holds tasks only weakly

    async def call(self, op: str, *args):
        writer = self._writer if self._writer is not None else await self._connect()
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = future
        writer.write(self._take_outbox() + orjson.dumps([call_id, op, *args]) + b"\n")
        return await future

    def send(self, op: str, *args) -> None:
        self._outbox.append(orjson.dumps([None, op, *args]) + b"\n")
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(ONE_WAY_DELAY_S,
                                                                self._flush_outbox)

    def _take_outbox(self) -> bytes:
        if not self._outbox:
            return b""
        lines = b"".join(self._outbox)
        self._outbox.clear()
        return lines

    def _flush_outbox(self) -> None:
        self._flush = None
        if self._outbox:   # no call carried them: they go alone
            task = asyncio.ensure_future(self._send_outbox())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_outbox(self) -> None:
        try:
            writer = self._writer if self._writer is not None else await self._connect()
        except OSError as exc:   # the store is gone (the gateway is stopping): nothing to correct
            log.warning("limits store unreachable, %d corrections dropped: %s",
                        len(self._outbox), exc)
            self._outbox.clear()
            return
        writer.write(self._take_outbox())

    async def _connect(self) -> asyncio.StreamWriter:
        self._connecting = self._connecting or asyncio.Lock()
        async with self._connecting:   # concurrent first calls share one connection
            if self._writer is None:
                reader, self._writer = await asyncio.open_unix_connection(
                    self.path, limit=STREAM_LIMIT)
                self._reader_task = asyncio.create_task(self._read(reader))
        return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        error: BaseException = ConnectionError("the limits store closed the connection")
        try:
            while line := await reader.readline():
                call_id, result, *failure = orjson.loads(line)
                future = self._waiting.pop(call_id, None)
                if future is None or future.done():
                    continue
                if failure:
                    future.set_exception(RuntimeError(f"limits store: {failure[0]}"))
                else:
                    future.set_result(result)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            error = exc
        finally:
            # Every caller still waiting hears of the loss; the next call reconnects.
            self._writer = None
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(error)
            self._waiting.clear()

    async def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._outbox:
            await self._send_outbox()
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task


class SharedRateLimiter(RateLimiter):
    """InMemoryRateLimiter's semantics, its counters in the owner shared by every worker."""

    def __init__(self, path: str, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S,
                 clock=None) -> None:
        super().__init__(window_s, bucket_s, clock)
        self.client = StoreClient(path)

    async def _acquire(self, counters: list[Counter], costs: list[int]) -> RawResult:
        wire = [(c.name, c.storage_key, c.limit, c.kind) for c in counters]
        return RawResult(*await self.client.call("acquire", wire, costs,
                                                 now_ms_from(self.clock)))

    async def _adjust(self, token_keys: list[str], bucket_ms: int, delta: int) -> None:
        self.client.send("adjust", token_keys, bucket_ms, delta, now_ms_from(self.clock))

    async def close(self) -> None:
        await self.client.close()


class SharedSpendTracker(SpendTracker):
    """InMemorySpendTracker's semantics, its counters in the owner shared by every worker."""

    def __init__(self, path: str, hold_ttl_s: float = DEFAULT_HOLD_TTL_S,
                 clock=time.time) -> None:
        self.hold_ttl_s, self.clock = hold_ttl_s, clock
        self.client = StoreClient(path)

    async def _reserve(self, counters: list[SpendKey], hold: BudgetHold,
                       expires_at: float) -> tuple[int, float]:
        keys = [(c.key, c.floor, c.budget.max_usd) for c in counters]
        index, spent = await self.client.call("reserve", keys, hold.hold_id,
                                              hold.estimate_usd, expires_at)
        return index, spent

    async def _settle(self, hold: BudgetHold, usd: float) -> None:
        await self.client.call("settle", list(hold.keys), hold.hold_id, usd)

    async def _get(self, key: str) -> tuple[float, float] | None:
        got = await self.client.call("get", key)
        return None if got is None else tuple(got)

    async def close(self) -> None:
        await self.client.close()

"""A pooled keep-alive HTTP/1.1 client for the gateway's calls to engines: asyncio protocols
with httptools' response parser, nothing else on the way.

    pool = WirePool()
    response = await pool.request(Target.of("http://127.0.0.1:8000/v1"), head, body,
                                  connect_timeout=5.0, deadline=loop.time() + 600)
    raw = await response.read()                 # a whole body (content-length or chunked)
    while (chunk := await response.next_chunk()) is not None: ...   # or as they arrive
    await response.aclose()                     # back to the pool when read to the end

`head` is the request line and headers up to `content-length: ` (the adapter builds it once
per backend); the length and body follow in one write. A connection goes back to the pool only
when its response was read to the end and the engine keeps it alive; a response closed
half-way (or a task cancelled while it waits) closes its connection, which an engine takes as
the client leaving and aborts the request. aiohttp's ClientSession did the same work with far
more Python per request (request/response objects, trace hooks, stream readers, timers).
Errors: WireConnectError (no connection, or it closed before the answer began: nothing was
answered, so the call may go elsewhere), WireProtocolError (a malformed or broken answer).
"""
from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 1 << 20         # buffered body bytes at which reading pauses until they are taken
DRAIN_AFTER_DONE_S = 0.05    # wait for a stream's chunked terminator after `data: [DONE]`


class WireError(Exception):
    """The engine call failed below HTTP."""


class WireConnectError(WireError):
    """No connection, or it closed before any of the answer arrived."""


class WireProtocolError(WireError):
    """A malformed answer, or one cut off half-way."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a base URL's requests go: host, port, TLS, and the path prefix."""
    host: str
    port: int
    tls: bool
    prefix: str

    @classmethod
    def of(cls, base_url: str) -> "Target":
        url = urlsplit(base_url)
        tls = url.scheme == "https"
        return cls(url.hostname or "127.0.0.1", url.port or (443 if tls else 80), tls,
                   url.path.rstrip("/"))

    @property
    def authority(self) -> str:
        return self.host if self.port == (443 if self.tls else 80) else f"{self.host}:{self.port}"


class _Conn(asyncio.Protocol):
    """One upstream connection and the response it is reading (one at a time)."""

    def __init__(self, pool: "WirePool", key: Target):
        self.pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.started = False      # the status line and headers are in
        self.done = False         # the whole body is in
        self.framed = False       # content-length or chunked (else the body ends at EOF)
        self.body: list[bytes] = []
        self.size = 0
        self.paused = False
        self.keep_alive = False
        self.error: WireError | None = None
        self.waiter: asyncio.Future | None = None

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(WireProtocolError(f"malformed upstream response: {exc}"))
            self.close()

    def connection_lost(self, exc) -> None:
        self.transport = None
        self.pool.forget(self)
        if self.done:
            return
        if self.started and not self.framed:
            self.done = True      # a body delimited by the connection's end
            self._wake()
        elif self.started:
            self._fail(WireProtocolError("upstream closed the connection mid-answer"))
        else:
            self._fail(WireConnectError(f"upstream closed the connection before answering"
                                        f"{f': {exc!r}' if exc else ''}"))

    # httptools callbacks
    def on_header(self, name: bytes, _value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.started = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.size += len(body)
        if self.size > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()   # read before the parser resets
        self._wake()

    # the response's side
    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: WireError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    async def wait(self, deadline: float | None = None) -> None:
        """Until the parser has more (headers, body, end) or the connection fails; TimeoutError
        at `deadline` (loop time). A timer rather than asyncio.timeout: no task bookkeeping."""
        if self.error is not None:
            raise self.error
        waiter = self.waiter = self.loop.create_future()
        timer = None if deadline is None else self.loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        finally:
            if self.waiter is waiter:   # (a waiter that lost its connection leaves it alone)
                self.waiter = None
            if timer is not None:
                timer.cancel()
        if self.error is not None and not self.body:
            raise self.error

    def take(self) -> bytes:
        body = self.body
        data = body[0] if len(body) == 1 else b"".join(body)
        self.body, self.size = [], 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return (self.done and self.error is None and self.transport is not None
                and not self.transport.is_closing() and self.keep_alive)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class WireResponse:
    """An answer's status and body: `next_chunk()` as they arrive, or `read()` it whole;
    TimeoutError past `deadline` (loop time, None: no limit)."""
    __slots__ = ("status", "deadline", "_conn", "_tail", "_closed", "_draining")

    def __init__(self, conn: _Conn, deadline: float | None):
        self.status = conn.status
        self.deadline = deadline
        self._conn = conn
        self._tail = b""
        self._closed = False
        self._draining = False

    def __aiter__(self) -> "WireResponse":
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def next_chunk(self, deadline: float | None = None) -> bytes | None:
        """The body bytes received so far (waiting for some), None at its end."""
        conn = self._conn
        while True:
            if self._closed:
                return None
            if conn.body:
                data = conn.take()
                self._tail = data[-16:]
                return data
            if conn.done:
                return None
            await conn.wait(deadline or self.deadline)

    async def read(self) -> bytes:
        """The whole body; the connection goes back to the pool."""
        conn = self._conn
        try:
            while not conn.done:
                await conn.wait(self.deadline)
            return conn.take()
        finally:
            self.release()

    def release(self) -> None:
        """Back to the pool if read to the end, else the connection is closed."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.reusable() and not conn.body:
            conn.pool.put(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        # An SSE stream closed right after `data: [DONE]` has only its chunked terminator
        # left in flight: wait a moment for it rather than paying a new connection later.
        # Only the first of concurrent closes waits (the relay's and its generator's own):
        # once released, the connection may already carry another request.
        conn = self._conn
        if self._draining:
            return
        self._draining = True
        try:
            if not self._closed and not conn.done and b"[DONE]" in self._tail:
                end = conn.loop.time() + DRAIN_AFTER_DONE_S
                while not conn.done and not self._closed:
                    await conn.wait(end)
                    conn.take()
        except (TimeoutError, WireError):
            pass
        finally:   # cancelled while draining included: closed, never left half-read
            self.release()


class WirePool:
    """Idle keep-alive connections per target, LIFO (the warmest first)."""

    def __init__(self, keepalive_expiry: float = 30.0, max_idle_per_target: int = 512):
        self.keepalive_expiry = keepalive_expiry
        self.max_idle = max_idle_per_target
        self.opened = 0     # connections made so far (tests read it)
        self._idle: dict[Target, list[_Conn]] = {}
        self._open: set[_Conn] = set()
        self._tls: ssl.SSLContext | None = None

    async def request(self, target: Target, head: bytes, body: bytes,
                      connect_timeout: float = 5.0,
                      deadline: float | None = None) -> WireResponse:
        """Send `head` + content-length + `body`; the response once its headers are in.
        `deadline` (loop time) bounds the whole exchange, the response's reads included:
        TimeoutError past it."""
        message = b"%s%d\r\n\r\n%s" % (head, len(body), body)
        conn = self._take(target)
        if conn is not None:
            try:
                return await self._exchange(conn, message, deadline)
            except WireConnectError:
                pass    # the engine closed the idle connection as we sent: once more, fresh
        conn = await self._connect(target, connect_timeout, deadline)
        return await self._exchange(conn, message, deadline)

    async def _exchange(self, conn: _Conn, message: bytes,
                        deadline: float | None) -> WireResponse:
        conn.reset()
        conn.transport.write(message)
        try:
            while not conn.started:
                await conn.wait(deadline)
        except BaseException:   # failed, timed out or cancelled: the engine must see us go
            conn.close()
            raise
        return WireResponse(conn, deadline)

    def _take(self, target: Target) -> _Conn | None:
        idle = self._idle.get(target)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.transport is None or conn.transport.is_closing():
                continue
            if now - conn.idle_since > self.keepalive_expiry:
                conn.close()
                continue
            return conn
        return None

    async def _connect(self, target: Target, timeout: float, deadline: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        tls = None
        if target.tls:
            tls = self._tls = self._tls or ssl.create_default_context()
        limit = loop.time() + timeout
        try:
            async with asyncio.timeout_at(limit if deadline is None else min(limit, deadline)):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, target), target.host, target.port, ssl=tls,
                    server_hostname=target.host if tls else None)
        except TimeoutError:
            if deadline is None or limit <= deadline:   # the connect limit, not the deadline
                raise WireConnectError(f"connect to {target.authority} timed out") from None
            raise
        except OSError as exc:
            raise WireConnectError(f"cannot connect to {target.authority}: {exc}") from exc
        self.opened += 1
        self._open.add(conn)
        return conn

    def put(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def forget(self, conn: _Conn) -> None:
        """A closed connection leaves the pool."""
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

"""Connection hygiene for every uvicorn server the product runs (gateway, control plane, engine).

uvicorn closes an idle keep-alive connection only after it has answered a request on it: a
connection that never sends a byte, or stops half-way through its headers, stays open for
ever, and enough of them exhaust the process's file descriptors. `uvicorn_config(app, limits,
host=..., port=...)` returns a uvicorn.Config whose HTTP protocol adds

- a header timeout: a connection must complete each request's headers within
  `header_timeout_s` of connecting (or of its previous answer), else it is closed;
- a connection cap: past `max_connections` open connections a new one is answered 503 in the
  OpenAI error shape and closed at once, so descriptors never run out;

and whose app is wrapped by `BodyLimit`: a body over `max_body_bytes` is answered 413 (from its
content-length, or while a chunked body arrives), and a body that stalls for `body_timeout_s`
is answered 408, both before the app runs. Every limit that is hit is logged (at most once per second per kind, with the
count since the last line, so a flood does not flood the log). `raise_fd_limit()` lifts the
soft RLIMIT_NOFILE to the hard one. `listen_socket(host, port)` binds the port up front, so a
server finds a port in use before it loads anything, and keeps it until uvicorn serves on it;
`listen_sockets(host, port, n)` binds n of them in one SO_REUSEPORT group, one per worker.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from dataclasses import dataclass

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from common.error_codes import ErrorCode

log = logging.getLogger("inferplane.connections")


@dataclass(frozen=True)
class ConnectionLimits:
    keep_alive_s: float = 5.0         # idle time allowed between requests on one connection
    header_timeout_s: float = 10.0    # time allowed to send a request's headers
    body_timeout_s: float = 30.0      # longest pause while a request body arrives
    max_connections: int = 4096       # open connections; more are answered 503 and closed
    max_body_bytes: int = 8 * 1024 * 1024
    # (path prefix, bytes): a larger cap for the paths that take uploads (POST /v1/files)
    upload_limits: tuple[tuple[str, int], ...] = ()


def error_body(message: str, kind: str, code: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None,
                                   "code": code}})


class _Throttled:
    """One log line per second at most for one kind of event, with how many happened."""

    def __init__(self, template: str):
        self.template, self.count, self.last = template, 0, 0.0

    def hit(self, *args) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= 1.0:
            log.warning(self.template + " (%d since the last report)", *args, self.count)
            self.count, self.last = 0, now


def _refusal(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


class HeadWithFirstBody:
    """The transport one uvicorn response cycle writes to. uvicorn writes a response's status
    line and headers, then its body, in two sends: on loopback each send is a TCP segment and
    a wake-up of the client. The head is held until the first body write of the same loop
    turn, so a whole JSON answer leaves in one send; a head with no body in that turn (an
    event stream waiting for its first event) goes out when the turn ends. `100 Continue` is
    never held: the client waits for it before it sends the body.

        cycle.transport = HeadWithFirstBody(protocol.transport, loop)
    """
    __slots__ = ("_transport", "_loop", "_head", "_started")

    def __init__(self, transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
        elif not self._started and not data.startswith(b"HTTP/1.1 100 "):
            self._started, self._head = True, data
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str):   # is_closing, get_extra_info, pause_reading, ...
        return getattr(self._transport, name)


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a header timeout and a connection cap."""
    refused = _Throttled("refused a connection: %d connections are open (max_connections)")
    timed_out = _Throttled("closed a connection that sent no complete request headers "
                           "within %.0fs (header_timeout_s)")
    busy = _refusal("503 Service Unavailable", error_body(
        "the server has too many open connections; retry shortly", "service_unavailable",
        "too_many_connections"))

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                refused.hit(len(self.connections) - 1)
                transport.write(busy)
                transport.close()
                return
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_s,
                                                          self._headers_late)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                timed_out.hit(limits.header_timeout_s)
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()
            # the cycle's task starts on a later loop turn: nothing was written through it yet
            if self.cycle is not None:
                self.cycle.transport = HeadWithFirstBody(self.transport, self.loop)

        def connection_lost(self, exc) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

    return GuardedHttpToolsProtocol


READ_BODY = "inferplane.body"   # scope key: the whole body BodyLimit read before the app ran


async def request_body(request) -> bytes:
    """A Starlette request's whole body: the one BodyLimit already read when it is in front
    (most of a small request's ASGI receive machinery skipped), else `request.body()`."""
    body = request.scope.get(READ_BODY)
    return await request.body() if body is None else body


class BodyLimit:
    """ASGI middleware: the body is read before the app runs, so a body past `max_bytes` (413)
    or one that stalls for `timeout_s` (408) is refused in the API's error shape before any
    handler sees it. The app then receives the whole body as one message."""

    def __init__(self, app, max_bytes: int, timeout_s: float,
                 upload_limits: tuple[tuple[str, int], ...] = ()):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s
        self.upload_limits = upload_limits
        self._too_large = _Throttled("refused a request body over %d bytes (max_body_bytes)")
        self._stalled = _Throttled("refused a request body that stalled for %.0fs "
                                   "(body_timeout_s)")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes = self._cap(scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > max_bytes:
            self._too_large.hit(max_bytes)
            return await _refuse(send, 413, f"the request body is over {max_bytes} bytes",
                                 "invalid_request_error")
        try:
            body = await self._read(receive, max_bytes)
        except _BodyRefused as exc:
            return await _refuse(send, exc.status, exc.message, exc.kind)
        if body is None:  # the client left before its body was complete
            return
        scope[READ_BODY] = body   # `request_body` takes it from here: no receive round trip
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:  # afterwards receive only reports a disconnect
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _cap(self, path: str) -> int:
        for prefix, limit in self.upload_limits:
            if path.startswith(prefix):
                return limit
        return self.max_bytes

    async def _read(self, receive, max_bytes: int) -> bytes | None:
        parts, size = [], 0
        while True:
            message = await receive() if _has_message(receive) \
                else await self._receive_or_stall(receive)
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                self._too_large.hit(max_bytes)
                raise _BodyRefused(413, f"the request body is over {max_bytes} bytes",
                                   "invalid_request_error")
            parts.append(chunk)
            if not message.get("more_body", False):
                return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _receive_or_stall(self, receive):
        try:
            async with asyncio.timeout(self.timeout_s):
                return await receive()
        except TimeoutError:
            self._stalled.hit(self.timeout_s)
            raise _BodyRefused(408, f"the request body stalled for {self.timeout_s:.0f}s",
                               "timeout_error") from None


def _has_message(receive) -> bool:
    """Whether `receive` answers without waiting: uvicorn's request cycle already holds the
    body that arrived (its message event is set). Most bodies arrive with their headers, so
    most requests need no stall timer (a timer and its cancellation on every request)."""
    event = getattr(getattr(receive, "__self__", None), "message_event", None)
    return isinstance(event, asyncio.Event) and event.is_set()


async def _refuse(send, status: int, message: str, kind: str) -> None:
    code = ErrorCode.BODY_TOO_LARGE if status == 413 else ErrorCode.BODY_TIMEOUT
    body = error_body(message, kind, code)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class _BodyRefused(Exception):
    def __init__(self, status: int, message: str, kind: str):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP parser refuses it before the app runs
    return None


def raise_fd_limit() -> int:
    """Lift the soft open-files limit to the hard one; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError):
            pass
    return soft


def uvicorn_config(app, limits: ConnectionLimits, **kwargs):
    """uvicorn.Config for `app` with the limits applied (kwargs: host, port, loop, ...)."""
    import uvicorn

    raise_fd_limit()
    return uvicorn.Config(BodyLimit(app, limits.max_body_bytes, limits.body_timeout_s,
                                    limits.upload_limits),
                          http=guarded_protocol(limits), timeout_keep_alive=limits.keep_alive_s,
                          **kwargs)


class PortInUse(OSError):
    """The address a server should listen on cannot be bound."""


def _address(host: str, port: int):
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _bound(host: str, port: int, reuse_port: bool, listen: bool = True) -> socket.socket:
    family, kind, proto, _, address = _address(host, port)
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
        if listen:
            sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror} (is another server "
                        "running there? choose another --port)") from None
    return sock


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening socket for (host, port); PortInUse with a clear message otherwise.
    Serve on it with `uvicorn.Server(config).run(sockets=[sock])`."""
    return _bound(host, port, reuse_port=False)


def listen_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one (host, port), one per worker process::

        socks = listen_sockets("0.0.0.0", 8000, 4)     # worker i serves on socks[i]

    With count > 1 they form one SO_REUSEPORT group: the kernel spreads new connections over
    them by a hash of the client's address and port. On one shared socket the worker that wakes
    first accepts every pending connection of a burst, and the others idle through it.
    The port is first bound without SO_REUSEPORT, so a port another server holds (even in a
    reuseport group of its own) is still PortInUse rather than silently shared."""
    if count == 1:
        return [listen_socket(host, port)]
    if not port:   # an ephemeral port: the group must share the one the first socket gets
        raise ValueError("listen_sockets needs a fixed port for more than one socket")
    _bound(host, port, reuse_port=False, listen=False).close()
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(_bound(host, port, reuse_port=True))
    except PortInUse:
        for sock in socks:
            sock.close()
        raise
    return socks

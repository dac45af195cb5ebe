"""Connection hygiene of a real `inferplane up` process: idle and half-sent connections are
closed after the header timeout while normal requests and /healthz are still served, a
connection past the cap is refused with a 503, bodies are bounded (413) and timed (408)."""
from __future__ import annotations

import asyncio
import select
import socket
import time

import httpx
import pytest

from common.connections import HeadWithFirstBody
from tests.conftest import running_up

HEADER_TIMEOUT_S = 3.0
MAX_CONNECTIONS = 330
CONFIG = {"models": [], "server": {"header_timeout_s": HEADER_TIMEOUT_S, "keep_alive_s": 1.0,
                                   "body_timeout_s": 2.0, "max_connections": MAX_CONNECTIONS,
                                   "max_body_bytes": 65536}}


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    work = tmp_path_factory.mktemp("conns")
    with running_up(work, CONFIG, ready_path="/healthz", timeout=120) as (base, key, _):
        yield base, key, work


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    """True when the server closes `sock` within `wait_s` (bytes still arriving, such as the
    rest of a response, are read and skipped)."""
    deadline = time.monotonic() + wait_s
    while True:
        readable, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            return False
        try:
            if sock.recv(65536) == b"":
                return True
        except ConnectionResetError:
            return True


NO_MODEL_BODY = b'{"model": "none", "messages": [{"role": "user", "content": "hi"}]}'


def _chat_head(key: str, length: int, extra: bytes = b"") -> bytes:
    """A chat request's head (connection: close), its body to follow."""
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
            + key.encode() + b"\r\ncontent-type: application/json\r\n" + extra
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % length)


def _read_to_close(sock: socket.socket, wait_s: float = 5.0) -> bytes:
    sock.settimeout(wait_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _assert_model_not_found(data: bytes) -> None:
    """The API answered (its 404 for an unknown model): the body was read whole."""
    head, _, answer = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404") and b'"model_not_found"' in answer, data[:300]


def _raw(base: str, request: bytes, wait_s: float = 10.0) -> bytes:
    with _connect(base) as sock:
        sock.sendall(request)
        return _read_to_close(sock, wait_s)


def test_idle_and_half_sent_connections_do_not_starve_the_server(up):
    base, key, work = up
    idle = [_connect(base) for _ in range(150)]
    half = [_connect(base) for _ in range(150)]
    for sock in half:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
    try:
        started = time.monotonic()
        assert httpx.get(base + "/healthz", timeout=5).status_code == 200
        models = httpx.get(base + "/v1/models", headers={"authorization": f"Bearer {key}"},
                           timeout=5)
        assert models.status_code == 200 and models.json()["object"] == "list"
        assert time.monotonic() - started < HEADER_TIMEOUT_S  # served while all 300 are held
        # every held connection is closed by the server once the header timeout has passed
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 3
        still_open = [s for s in idle + half
                      if not _closed_by_server(s, max(0.0, deadline - time.monotonic()))]
        assert not still_open, f"{len(still_open)} of 300 connections are still open"
    finally:
        for sock in idle + half:
            sock.close()
    assert "request headers" in (work / "up.log").read_text()  # the limit hit was logged
    assert httpx.get(base + "/healthz", timeout=5).status_code == 200


def test_connections_past_the_cap_are_refused_with_a_503(up):
    base, _, work = up
    held = [_connect(base) for _ in range(MAX_CONNECTIONS)]
    try:
        extra = _connect(base)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
        extra.settimeout(5)
        answer = extra.recv(65536)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"too_many_connections" in answer
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)  # the server sees the closes
    assert httpx.get(base + "/healthz", timeout=5).status_code == 200
    assert "max_connections" in (work / "up.log").read_text()


def test_idle_keep_alive_connections_are_closed(up):
    base, _, _ = up
    with _connect(base) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_by_server(sock, 1.0 + 2.0)


def test_request_bodies_are_bounded_and_timed(up):
    base, key, _ = up
    auth = f"authorization: Bearer {key}\r\n".encode()
    big = _raw(base, b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n" + auth
               + b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n")
    assert big.startswith(b"HTTP/1.1 413") and b'"code":"body_too_large"' in big
    chunk = b"x" * 40000
    chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n" + auth
               + b"transfer-encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(2)) + b"0\r\n\r\n")
    assert _raw(base, chunked).startswith(b"HTTP/1.1 413")
    started = time.monotonic()
    stalled = _raw(base, b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n" + auth
                   + b"content-length: 100\r\n\r\n{\"model\"")
    assert stalled.startswith(b"HTTP/1.1 408") and b"body_timeout" in stalled
    assert 1.5 < time.monotonic() - started < 8
    resp = httpx.post(base + "/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                      json={"model": "none", "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 404  # a normal-sized body still reaches the API


def test_a_body_sent_after_its_headers_and_in_parts_is_read_whole(up):
    """The body arrives after its headers (the read waits, under the stall timer) and in two
    parts with a pause shorter than body_timeout_s between them: answered, not refused."""
    base, key, _ = up
    with _connect(base) as sock:
        sock.sendall(_chat_head(key, len(NO_MODEL_BODY)))
        for part in (NO_MODEL_BODY[:20], NO_MODEL_BODY[20:]):
            time.sleep(0.6)
            sock.sendall(part)
        _assert_model_not_found(_read_to_close(sock))


def test_the_open_files_limit_is_raised_to_the_hard_limit():
    import resource

    from common.connections import raise_fd_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(256, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert raise_fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _accepted(sock: socket.socket) -> int:
    """How many connections wait in `sock`'s backlog (accepted and closed here)."""
    sock.setblocking(False)
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_worker_sockets_share_a_burst_and_refuse_a_taken_port():
    """`gateway --workers N` listens on N sockets of one SO_REUSEPORT group: a burst of new
    connections reaches every socket (on one shared socket the first worker to wake took all of
    it), and a port another server holds, plainly or in its own group, is PortInUse."""
    from common.connections import PortInUse, listen_socket, listen_sockets
    from tests.conftest import free_port

    port = free_port()
    socks = listen_sockets("127.0.0.1", port, 2)
    try:
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(32)]
        time.sleep(0.2)
        counts = [_accepted(sock) for sock in socks]
        for client in clients:
            client.close()
        assert sum(counts) == 32 and min(counts) > 0, counts
        with pytest.raises(PortInUse, match="is another server running there"):
            listen_sockets("127.0.0.1", port, 2)   # the group is not joined by a second one
        with pytest.raises(PortInUse):
            listen_socket("127.0.0.1", port)
    finally:
        for sock in socks:
            sock.close()
    plain = listen_socket("127.0.0.1", port)
    try:
        with pytest.raises(PortInUse):
            listen_sockets("127.0.0.1", port, 3)
    finally:
        plain.close()


class _Recording:
    """A transport that keeps what is written to it."""

    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None


async def test_a_head_and_its_body_leave_in_one_write():
    loop = asyncio.get_running_loop()
    answer, stream, continued = _Recording(), _Recording(), _Recording()
    answer_via = HeadWithFirstBody(answer, loop)
    answer_via.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    answer_via.write(b"{}")
    assert answer.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert answer_via.get_extra_info("peername") == ("127.0.0.1", 1)

    via = HeadWithFirstBody(stream, loop)        # an event stream: no body in this turn
    via.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    assert stream.writes == []
    await asyncio.sleep(0)                       # the turn ends: the head goes alone
    assert stream.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
    via.write(b"5\r\nhello\r\n")
    assert len(stream.writes) == 2

    via = HeadWithFirstBody(continued, loop)     # the client waits for 100 Continue
    via.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert continued.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    via.write(b"HTTP/1.1 413 Payload Too Large\r\n\r\n")
    via.close()                                  # a held head is written before the close
    assert continued.writes[-1].startswith(b"HTTP/1.1 413") and continued.closed


def test_a_client_waiting_for_100_continue_gets_it_and_then_its_answer(up):
    base, key, _ = up
    with _connect(base) as sock:
        sock.sendall(_chat_head(key, len(NO_MODEL_BODY), b"expect: 100-continue\r\n"))
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(NO_MODEL_BODY)
        _assert_model_not_found(_read_to_close(sock))


def test_the_body_that_body_limit_read_is_what_the_app_reads_and_receive_still_replays_it():
    """BodyLimit hands the body it read to the app in the scope (request_body takes it without
    a receive round trip); an app reading through receive gets the same bytes, then the
    client's disconnect."""
    import asyncio

    from starlette.requests import Request

    from common.connections import READ_BODY, BodyLimit, request_body

    seen = {}

    async def app(scope, receive, send):
        request = Request(scope, receive)
        seen["scope"] = scope.get(READ_BODY)
        seen["request_body"] = await request_body(request)
        seen["body"] = await request.body()
        seen["after"] = (await receive())["type"]

    parts = iter([{"type": "http.request", "body": b'{"a":', "more_body": True},
                  {"type": "http.request", "body": b' 1}', "more_body": False},
                  {"type": "http.disconnect"}])

    async def receive():
        return next(parts)

    scope = {"type": "http", "method": "POST", "path": "/v1/x", "headers": [],
             "query_string": b""}
    asyncio.run(BodyLimit(app, 1024, 5.0)(scope, receive, None))
    assert seen == {"scope": b'{"a": 1}', "request_body": b'{"a": 1}', "body": b'{"a": 1}',
                    "after": "http.disconnect"}

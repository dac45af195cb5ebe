"""The wire client against real HTTP/1.1 servers on sockets: content-length and chunked bodies,
keep-alive reuse, `connection: close`, idle connections the server closed, broken and malformed
answers, and a cancelled call closing its connection."""
from __future__ import annotations

import asyncio

import pytest

from engine_adapter.wire_client import (HIGH_WATER, Target, WireConnectError, WirePool,
                                         WireProtocolError)
from tests.conftest import free_port

HEAD = b"POST /v1/x HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: "


class Server:
    """Reads each request (content-length framed) and answers with `answer(body)`'s bytes (a
    list: parts in turn, a float a pause); None closes the connection without answering.
    Counts connections and the client hang-ups it saw."""

    def __init__(self, answer):
        self.answer = answer
        self.connections = 0
        self.eofs = 0
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.bodies.append(body)
                reply = self.answer(body)
                if reply is None:
                    break
                for part in reply if isinstance(reply, list) else [reply]:
                    if isinstance(part, float):   # a pause, in which the client may hang up
                        try:
                            if await asyncio.wait_for(reader.read(1), part) == b"":
                                raise ConnectionError("client closed")
                        except TimeoutError:
                            pass
                        continue
                    writer.write(part)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eofs += 1
        writer.close()

    async def __aenter__(self) -> Target:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return Target.of(f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1")

    async def __aexit__(self, *exc) -> None:
        self.server.close()


def fixed(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def chunked(*parts: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n")


async def test_target_of_base_urls():
    assert Target.of("http://h:81/v1/") == Target("h", 81, False, "/v1")
    assert Target.of("https://h/v1").port == 443 and Target.of("https://h/v1").authority == "h"
    assert Target.of("http://127.0.0.1:9/v1").authority == "127.0.0.1:9"


async def test_content_length_and_chunked_bodies_share_one_connection():
    answers = iter([fixed(b'{"a":1}'), chunked(b"data: 1\n\n", b"data: [DONE]\n\n")] * 5)
    server = Server(lambda body: next(answers))
    pool = WirePool()
    async with server as target:
        for i in range(5):
            response = await pool.request(target, HEAD, b'{"n":%d}' % i)
            assert response.status == 200 and await response.read() == b'{"a":1}'
            response = await pool.request(target, HEAD, b"{}")
            assert b"".join([c async for c in response]) == b"data: 1\n\ndata: [DONE]\n\n"
            await response.aclose()
    await pool.aclose()
    assert pool.opened == 1 and server.connections == 1
    assert server.bodies[0] == b'{"n":0}'


async def test_connection_close_answer_is_not_reused():
    server = Server(lambda body: fixed(b"ok", b"connection: close\r\n"))
    pool = WirePool()
    async with server as target:
        for _ in range(3):
            assert await (await pool.request(target, HEAD, b"")).read() == b"ok"
    await pool.aclose()
    assert pool.opened == 3


async def test_idle_connection_closed_by_server_is_replaced():
    calls = []

    def answer(body):
        calls.append(body)
        return fixed(b"ok") if len(calls) % 2 else None   # every second request: hang up
    server = Server(answer)
    pool = WirePool()
    async with server as target:
        assert await (await pool.request(target, HEAD, b"1")).read() == b"ok"
        # The reused connection is closed on the next request, before any answer: the pool
        # sends once more on a fresh connection.
        assert await (await pool.request(target, HEAD, b"2")).read() == b"ok"
    await pool.aclose()
    assert pool.opened == 2 and calls == [b"1", b"2", b"2"]


async def test_refused_connection_is_a_connect_error():
    with pytest.raises(WireConnectError):
        await WirePool().request(Target.of(f"http://127.0.0.1:{free_port()}/v1"), HEAD, b"")


async def test_malformed_and_cut_answers_are_protocol_errors():
    async with Server(lambda body: b"NOT HTTP\r\n\r\n") as target:
        with pytest.raises(WireProtocolError):
            await WirePool().request(target, HEAD, b"")
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"
    async with Server(lambda body: [cut, None]) as target:
        response = await WirePool().request(target, HEAD, b"")
        with pytest.raises(WireProtocolError):
            await response.read()


async def test_answer_before_any_byte_closing_is_a_connect_error():
    async with Server(lambda body: None) as target:
        with pytest.raises(WireConnectError):
            await WirePool().request(target, HEAD, b"")


async def test_cancelled_call_closes_its_connection():
    server = Server(lambda body: [5.0, fixed(b"late")])
    pool = WirePool()
    async with server as target:
        task = asyncio.create_task(pool.request(target, HEAD, b""))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if server.eofs:
                break
            await asyncio.sleep(0.01)
    assert server.eofs == 1


async def test_stream_abandoned_half_way_drops_connection():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n"
    server = Server(lambda body: [head, 5.0])
    pool = WirePool()
    async with server as target:
        response = await pool.request(target, HEAD, b"")
        assert await response.__anext__() == b"first"
        await response.aclose()
        for _ in range(100):
            if server.eofs:
                break
            await asyncio.sleep(0.01)
    assert server.eofs == 1 and not pool._idle.get(target)


async def test_large_body_pauses_reading_and_arrives_whole():
    body = bytes(range(256)) * (3 * HIGH_WATER // 256)
    async with Server(lambda _: fixed(body)) as target:
        response = await WirePool().request(target, HEAD, b"")
        received = []
        async for chunk in response:
            received.append(chunk)
            await asyncio.sleep(0)
        assert b"".join(received) == body


async def test_deadline_bounds_headers_and_body_and_closes_connection():
    slow_head = Server(lambda body: [5.0, fixed(b"late")])
    async with slow_head as target:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await WirePool().request(target, HEAD, b"", deadline=loop.time() + 0.1)
        for _ in range(100):
            if slow_head.eofs:
                break
            await asyncio.sleep(0.01)
    assert slow_head.eofs == 1
    part = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"
    async with Server(lambda body: [part, 5.0]) as target:
        response = await WirePool().request(target, HEAD, b"", deadline=loop.time() + 0.2)
        assert await response.next_chunk() == b"abc"
        with pytest.raises(TimeoutError):
            await response.next_chunk()
        await response.aclose()


async def test_concurrent_closes_after_done_leave_the_reused_connection_alone():
    # The relay and its stream's generator both close a stream that stopped at [DONE]: the
    # connection goes back to the pool once, and the next request on it is not disturbed.
    event = b"data: [DONE]\n\n"
    head = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (len(event), event))
    answers = iter([[head, 0.02, b"0\r\n\r\n"], [0.08, fixed(b"ok")]])
    pool = WirePool()
    async with Server(lambda body: next(answers)) as target:
        response = await pool.request(target, HEAD, b"")
        assert await response.next_chunk() == event
        closes = [asyncio.create_task(response.aclose()) for _ in range(2)]
        await asyncio.sleep(0.035)   # the terminator is in: the connection is back in the pool
        second = await asyncio.wait_for(pool.request(target, HEAD, b""), 1)
        assert await asyncio.wait_for(second.read(), 1) == b"ok"
        await asyncio.gather(*closes)
    assert pool.opened == 1

"""The aiohttp transport under the engine adapters, against real HTTP servers: connections are
reused (streams closed right after [DONE] included), a stream abandoned mid-way drops its
connection so the engine aborts the request, and failures surface as the httpx errors the
adapters map to EngineError kinds."""
from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from engine_adapter.aiohttp_transport import AiohttpTransport
from engine_adapter.base import EngineError
from engine_adapter.openai_http import OpenAIHTTPAdapter
from tests.conftest import free_port, start_process, stop_process, wait_http

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _server(args: list[str], health_path: str):
    port = free_port()
    proc = start_process([*args, "--port", str(port)])
    try:
        wait_http(f"http://127.0.0.1:{port}{health_path}", proc, timeout=60)
    except BaseException:
        stop_process(proc)
        raise
    return proc, port


@pytest.fixture(scope="module")
def mock_engine():
    proc, port = _server(["bench/_mock_engine.py"], "/health")
    yield port
    stop_process(proc)


@pytest.fixture(scope="module")
def slow_engine():
    proc, port = _server(["-m", "tests.gateway.fake_engine", "--name", "slow"], "/health")
    httpx.post(f"http://127.0.0.1:{port}/control", json={"token_delay": 0.2}, trust_env=False)
    yield port
    stop_process(proc)


def counting_client() -> tuple[httpx.AsyncClient, list[int]]:
    """A client, and the connections made so far: aiohttp's (httpx requests) in the list, the
    wire pool's (the adapters' calls) counted by `opened`."""
    created: list[int] = []
    trace = aiohttp.TraceConfig()

    async def on_create(_session, _ctx, _params) -> None:
        created.append(1)
    trace.on_connection_create_end.append(on_create)
    transport = AiohttpTransport(trace_configs=[trace])
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5.0, read=None)), created


def opened(client: httpx.AsyncClient) -> int:
    return client._transport.wire.opened


async def read_to_done(stream) -> list[bytes]:
    events = []
    async for event in stream:
        events.append(event)
        if event.startswith(b"data: [DONE]"):
            break   # as the gateway's relay does: stop at [DONE], then close
    await stream.aclose()
    return events


async def test_one_connection_serves_sequential_streams_and_bodies(mock_engine):
    client, created = counting_client()
    adapter = OpenAIHTTPAdapter(f"http://127.0.0.1:{mock_engine}/v1", client=client)
    for _ in range(20):
        events = await read_to_done(await adapter.chat({**CHAT, "stream": True}))
        assert events[-1] == b"data: [DONE]\n\n" and len(events) == 6
        body = await adapter.chat(CHAT)
        assert body["choices"][0]["message"]["content"] == "one two three four"
    await client.aclose()
    assert opened(client) == 1 and not created


async def late_terminator_server() -> tuple[asyncio.AbstractServer, int]:
    """HTTP/1.1 keep-alive server whose SSE body ends with [DONE] and then, 20 ms later, the
    chunked terminator: the last bytes are still in flight when the relay stops reading."""
    event = b"data: [DONE]\n\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n"
                             + b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_stream_closed_at_done_waits_for_the_terminator_and_keeps_connection():
    server, port = await late_terminator_server()
    client, created = counting_client()
    adapter = OpenAIHTTPAdapter(f"http://127.0.0.1:{port}/v1", client=client)
    for _ in range(5):
        assert await read_to_done(await adapter.chat({**CHAT, "stream": True})) == \
            [b"data: [DONE]\n\n"]
    await client.aclose()
    server.close()
    assert opened(client) == 1


async def test_abandoned_stream_drops_its_connection_and_engine_aborts(slow_engine):
    client, created = counting_client()
    base = f"http://127.0.0.1:{slow_engine}"
    adapter = OpenAIHTTPAdapter(base + "/v1", client=client)
    before = httpx.get(base + "/stats", trust_env=False).json()["cancelled"]
    stream = await adapter.chat({**CHAT, "max_tokens": 50, "stream": True})
    await stream.aclose()   # the client went away after the first event
    for _ in range(50):
        if httpx.get(base + "/stats", trust_env=False).json()["cancelled"] > before:
            break
        await asyncio.sleep(0.05)
    assert httpx.get(base + "/stats", trust_env=False).json()["cancelled"] == before + 1
    await adapter.chat({**CHAT, "max_tokens": 1})   # needs a new connection
    await client.aclose()
    assert opened(client) == 2


async def test_refused_connection_is_a_connect_error():
    client, _ = counting_client()
    adapter = OpenAIHTTPAdapter(f"http://127.0.0.1:{free_port()}/v1", client=client)
    with pytest.raises(EngineError) as info:
        await adapter.chat(CHAT)
    assert info.value.kind == "connect" and info.value.retryable
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{free_port()}/health")
    await client.aclose()


async def test_error_status_keeps_engine_body(mock_engine):
    client, _ = counting_client()
    r = await client.post(f"http://127.0.0.1:{mock_engine}/v1/chat/completions",
                          content=b"not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"] == "invalid JSON"
    await client.aclose()

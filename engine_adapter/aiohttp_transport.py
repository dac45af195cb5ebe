"""An httpx transport that sends through aiohttp's connection pool.

httpx's default pool (httpcore on anyio) costs about half of the gateway's CPU per proxied
request and scans every pooled connection on each request; aiohttp's C-accelerated HTTP/1.1
client and connector do the same work several times cheaper. Adapters keep speaking httpx
(requests, responses, exceptions), only the wire layer changes: aiohttp errors are raised as
the httpx exceptions the adapters already handle.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator

import aiohttp
import httpx

from engine_adapter.wire_client import WirePool

DRAIN_AFTER_DONE_S = 0.05


class ResponseStream(httpx.AsyncByteStream):
    """An aiohttp response body as httpx bytes (its errors as httpx's); `aclose` keeps the
    connection when the body was read to the end."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request | None):
        self._response = response
        self._request = request
        self._tail = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                self._tail = chunk[-16:]
                yield chunk
        except asyncio.TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except aiohttp.ClientPayloadError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=self._request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(str(exc), request=self._request) from exc

    async def aclose(self) -> None:
        # A response abandoned half-way must drop its connection: the engine sees the client
        # go away and aborts the request. A fully read one returns to the pool. An SSE stream
        # closed right after `data: [DONE]` has only its chunked terminator left in flight:
        # wait a moment for it rather than paying a new connection for the next request.
        content = self._response.content
        if not content.at_eof() and b"[DONE]" in self._tail:
            try:
                async with asyncio.timeout(DRAIN_AFTER_DONE_S):
                    while await content.readany():
                        pass
            except (asyncio.TimeoutError, aiohttp.ClientError):
                pass
        if content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, max_connections: int = 2048, keepalive_expiry: float = 30.0,
                 trace_configs: list[aiohttp.TraceConfig] | None = None):
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self.trace_configs = trace_configs   # aiohttp's connection/request event hooks
        self._session: aiohttp.ClientSession | None = None
        # The adapters' hot path (chat, completions, embeddings) skips httpx and aiohttp both.
        self.wire = WirePool(keepalive_expiry=keepalive_expiry)

    def session(self) -> aiohttp.ClientSession:
        """The pooled session, for callers that send on it directly (the adapters' hot path)."""
        return self._session or self._open()

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use, inside the event loop that will run the requests.
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0,
                                         keepalive_timeout=self.keepalive_expiry,
                                         enable_cleanup_closed=False, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                              skip_auto_headers=("User-Agent",),
                                              cookie_jar=aiohttp.DummyCookieJar(),
                                              trace_configs=self.trace_configs)
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session or self._open()
        t = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=t.get("connect"),
                                        sock_read=t.get("read"))
        body = request.content if request.method not in ("GET", "HEAD") else None
        try:
            response = await session.request(request.method, str(request.url),
                                             headers=request.headers.multi_items(), data=body,
                                             allow_redirects=False, timeout=timeout,
                                             compress=None)
        except asyncio.TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        return httpx.Response(response.status, headers=response.raw_headers,
                              stream=ResponseStream(response, request),
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    async def aclose(self) -> None:
        await self.wire.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

"""EngineAdapter for OpenAI-compatible HTTP servers (vLLM, SGLang, TGI, llama.cpp, builtin).

Streaming is a byte-level pass-through: upstream SSE is split into events and each event is
handed on unchanged. `chat`/`completions` return only after the first event has arrived, so a
caller can still retry elsewhere on connect errors, 5xx and first-token timeouts without the
client having seen a byte. Closing the stream closes the upstream connection, which the engine
takes as a client disconnect and aborts the request.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

import httpx
import orjson

from common.error_codes import UpstreamErrorKind
from common.tracing import trace_header_lines
from engine_adapter.aiohttp_transport import AiohttpTransport
from engine_adapter.base import EngineAdapter, EngineError, EngineStream, LoadView
from engine_adapter.metrics_parse import parse_load
from engine_adapter.wire_client import Target, WireConnectError, WireError, WirePool, WireResponse


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    first_token: float = 60.0
    total: float = 600.0


def create_http_client(max_connections: int = 2048, keepalive: int = 512,
                       connect_timeout: float = 5.0,
                       event_hooks: dict | None = None) -> httpx.AsyncClient:
    """One pooled HTTP/1.1 keep-alive client shared by every backend adapter."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=keepalive,
                          keepalive_expiry=30.0)
    # read=None: per-request deadlines are enforced by the adapter (first token, total).
    timeout = httpx.Timeout(connect=connect_timeout, read=None, write=30.0, pool=connect_timeout)
    # trust_env=False: a proxy from the environment must never sit between gateway and engines.
    # The aiohttp transport carries the bytes: httpx's own pool dominated the gateway's CPU.
    transport = AiohttpTransport(max_connections=max_connections, keepalive_expiry=30.0)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False, http1=True,
                             transport=transport, event_hooks=event_hooks)


def _wire_of(client: httpx.AsyncClient) -> WirePool | None:
    """The wire pool of the aiohttp transport under `client`, if that is what carries its
    bytes: chat, completions and embeddings then go straight to it (engine_adapter/wire_client),
    skipping httpx's and aiohttp's request/response objects. httpx event hooks are not run on
    that path; the trace context they carried is written by the adapter itself."""
    transport = getattr(client, "_transport", None)
    return transport.wire if isinstance(transport, AiohttpTransport) else None


def _reader(chunks: AsyncIterator[bytes]) -> Callable[[float], Awaitable[bytes | None]]:
    """`read(deadline)` over an httpx body iterator (see _SSEStream)."""
    async def read(deadline: float) -> bytes | None:
        try:
            async with asyncio.timeout_at(deadline):
                return await chunks.__anext__()
        except StopAsyncIteration:
            return None
    return read


def _server_root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def _error_body(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"message": raw.decode("utf-8", "replace")[:2000]}
    return body if isinstance(body, dict) else {"message": str(body)}


def _json_answer(raw: bytes) -> dict:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise EngineError(UpstreamErrorKind.PROTOCOL, "upstream returned invalid JSON") from exc


class _SSEStream(EngineStream):
    """SSE events of one upstream response; the first events were read ahead by the adapter.
    `read(deadline)`: the next body bytes, None at the end, TimeoutError past `deadline`."""

    def __init__(self, response: httpx.Response | WireResponse,
                 read: Callable[[float], Awaitable[bytes | None]],
                 pending: list[bytes], buffer: bytes, deadline: float):
        self._response = response   # anything whose aclose() ends the upstream response
        self._read = read
        self._pending = pending
        self._buffer = buffer
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                if self._pending:
                    yield self._pending.pop(0)
                    continue
                event = await self.next_event()
                if event is None:
                    return
                yield event
        finally:
            await self.aclose()

    def ready_events(self) -> list[bytes]:
        """Events already received in full, taken without waiting: a relay that forwards them
        in one write pays one client send instead of one per event."""
        events, self._pending = self._pending, []
        buffer = self._buffer
        start = 0
        while (cut := buffer.find(b"\n\n", start)) >= 0:
            events.append(buffer[start:cut + 2])
            start = cut + 2
        if start:
            self._buffer = buffer[start:]
        return events

    async def next_event(self) -> bytes | None:
        """The next complete event (separator included), None at end of stream."""
        while True:
            cut = self._buffer.find(b"\n\n")
            if cut >= 0:
                event, self._buffer = self._buffer[:cut + 2], self._buffer[cut + 2:]
                return event
            try:
                chunk = await self._read(self._deadline)
            except TimeoutError:
                raise EngineError(UpstreamErrorKind.TIMEOUT, "upstream exceeded the total request timeout")
            except (httpx.HTTPError, WireError) as exc:
                raise EngineError(UpstreamErrorKind.PROTOCOL, f"upstream stream broke: {exc!r}") from exc
            if chunk is None:
                rest, self._buffer = self._buffer.strip(), b""
                return rest + b"\n\n" if rest else None
            if b"\r" in chunk:
                chunk = chunk.replace(b"\r\n", b"\n")
            self._buffer += chunk

    async def aclose(self) -> None:
        await self._response.aclose()


class OpenAIHTTPAdapter(EngineAdapter):
    def __init__(self, base_url: str, engine: str = "vllm", client: httpx.AsyncClient | None = None,
                 timeouts: Timeouts = Timeouts(), api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.root = _server_root(self.base_url)
        self.engine = engine
        self.timeouts = timeouts
        self._owns_client = client is None
        self._client = client or create_http_client(connect_timeout=timeouts.connect)
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._wire = _wire_of(self._client)
        # The direct path reads raw bytes (the session does not decompress): ask for them.
        self._wire_headers = {**self._headers, "accept-encoding": "identity"}
        self._target = Target.of(self.base_url)
        self._heads: dict[str, bytes] = {}

    async def chat(self, body: dict) -> dict | EngineStream:
        return await self._call("/chat/completions", body)

    async def completions(self, body: dict) -> dict | EngineStream:
        return await self._call("/completions", body)

    async def embeddings(self, body: dict) -> dict:
        body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        return await self._call("/embeddings", body)  # an answer, never a stream

    async def _call(self, path: str, body: dict) -> dict | EngineStream:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeouts.total
        stream = body.get("stream")
        if self._wire is not None:
            payload = orjson.dumps(body)
            if stream:
                first_deadline = min(deadline, loop.time() + self.timeouts.first_token)
                return await self._wire_stream(path, payload, first_deadline, deadline)
            return await self._wire_complete(path, payload, deadline)
        request = self._client.build_request("POST", self.base_url + path,
                                             content=orjson.dumps(body), headers=self._headers)
        if stream:
            first_deadline = min(deadline, loop.time() + self.timeouts.first_token)
            return await self._open_stream(request, first_deadline, deadline)
        return await self._complete(request, deadline)

    def _wire_head(self, path: str) -> bytes:
        """The request line and headers up to `content-length: `, with the current trace
        context when there is one to carry."""
        head = self._heads.get(path)
        if head is None:
            head = self._heads[path] = (
                f"POST {self._target.prefix}{path} HTTP/1.1\r\nhost: {self._target.authority}"
                f"\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self._wire_headers.items())
                + "content-length: ").encode("latin-1")
        extra = trace_header_lines()
        if not extra:
            return head
        return head[:-len(b"content-length: ")] + extra + b"content-length: "

    async def _wire_send(self, path: str, payload: bytes, deadline: float,
                         timeout_kind: str) -> WireResponse:
        """POST on the wire pool; EngineError (as `_send` classifies) on failure."""
        try:
            response = await self._wire.request(self._target, self._wire_head(path), payload,
                                                self.timeouts.connect, deadline)
        except TimeoutError:
            raise EngineError(timeout_kind, "upstream did not answer in time")
        except WireConnectError as exc:
            raise EngineError(UpstreamErrorKind.CONNECT, f"cannot connect to {self.base_url}: {exc!r}") from exc
        except WireError as exc:
            raise EngineError(UpstreamErrorKind.PROTOCOL, f"upstream request failed: {exc!r}") from exc
        if response.status >= 400:
            try:
                raw = await response.read()
            except (TimeoutError, WireError):
                raw = b""
            finally:
                response.release()
            kind = UpstreamErrorKind.HTTP_4XX if response.status < 500 else UpstreamErrorKind.HTTP_5XX
            raise EngineError(kind, f"upstream answered {response.status}",
                              status=response.status, body=_error_body(raw))
        return response

    async def _wire_complete(self, path: str, payload: bytes, deadline: float) -> dict:
        response = await self._wire_send(path, payload, deadline, "timeout")
        try:
            raw = await response.read()
        except TimeoutError:
            raise EngineError(UpstreamErrorKind.TIMEOUT, "upstream exceeded the total request timeout")
        except WireError as exc:
            raise EngineError(UpstreamErrorKind.PROTOCOL, f"upstream response broke: {exc!r}") from exc
        finally:
            response.release()
        return _json_answer(raw)

    async def _wire_stream(self, path: str, payload: bytes, first_deadline: float,
                           deadline: float) -> EngineStream:
        response = await self._wire_send(path, payload, first_deadline, UpstreamErrorKind.FIRST_TOKEN_TIMEOUT)
        return await self._read_ahead(response, response.next_chunk, first_deadline, deadline)

    async def _send(self, request: httpx.Request, deadline: float,
                    timeout_kind: str) -> httpx.Response:
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client.send(request, stream=True)
        except TimeoutError:
            raise EngineError(timeout_kind, "upstream did not answer in time")
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise EngineError(UpstreamErrorKind.CONNECT, f"cannot connect to {self.base_url}: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise EngineError(UpstreamErrorKind.PROTOCOL, f"upstream request failed: {exc!r}") from exc
        if response.status_code >= 400:
            await self._raise_http_error(response, deadline)
        return response

    async def _raise_http_error(self, response: httpx.Response, deadline: float) -> None:
        try:
            async with asyncio.timeout_at(deadline):
                raw = await response.aread()
        except (TimeoutError, httpx.HTTPError):
            raw = b""
        finally:
            await response.aclose()
        status = response.status_code
        kind = UpstreamErrorKind.HTTP_4XX if status < 500 else UpstreamErrorKind.HTTP_5XX
        raise EngineError(kind, f"upstream answered {status}", status=status,
                          body=_error_body(raw))

    async def _open_stream(self, request: httpx.Request, first_deadline: float,
                           deadline: float) -> EngineStream:
        response = await self._send(request, first_deadline, UpstreamErrorKind.FIRST_TOKEN_TIMEOUT)
        # Without a content-encoding the raw bytes are the content: skip httpx's decoding layers.
        chunks = response.aiter_bytes() if "content-encoding" in response.headers \
            else response.aiter_raw()
        return await self._read_ahead(response, _reader(chunks), first_deadline, deadline)

    async def _read_ahead(self, response, read, first_deadline: float,
                          deadline: float) -> EngineStream:
        """The stream, once its first data event is in: until then the call may be retried."""
        stream = _SSEStream(response, read, [], b"", first_deadline)
        pending: list[bytes] = []
        try:
            # Read ahead to the first data event: until then the request may be retried.
            while True:
                event = await stream.next_event()
                if event is None:
                    raise EngineError(UpstreamErrorKind.PROTOCOL, "upstream closed the stream before any data")
                pending.append(event)
                if event.startswith(b"data:"):
                    break
        except EngineError as exc:
            await response.aclose()
            if exc.kind == "timeout":
                raise EngineError(UpstreamErrorKind.FIRST_TOKEN_TIMEOUT, "no first token in time") from exc
            raise
        except BaseException:
            await response.aclose()
            raise
        return _SSEStream(response, read, pending, stream._buffer, deadline)

    async def _complete(self, request: httpx.Request, deadline: float) -> dict:
        response = await self._send(request, deadline, "timeout")
        try:
            async with asyncio.timeout_at(deadline):
                raw = await response.aread()
        except TimeoutError:
            raise EngineError(UpstreamErrorKind.TIMEOUT, "upstream exceeded the total request timeout")
        except httpx.HTTPError as exc:
            raise EngineError(UpstreamErrorKind.PROTOCOL, f"upstream response broke: {exc!r}") from exc
        finally:
            await response.aclose()
        return _json_answer(raw)

    async def _get(self, url: str, timeout: float) -> httpx.Response:
        return await self._client.get(url, timeout=timeout, headers=self._headers)

    async def health(self) -> bool:
        try:
            response = await self._get(self.root + "/health", self.timeouts.connect)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def load(self) -> LoadView:
        response = await self._get(self.root + "/metrics", self.timeouts.connect)
        response.raise_for_status()
        return parse_load(self.engine, response.text)

    async def kv_summary(self) -> dict | None:
        if self.engine != "builtin":
            return None
        response = await self._get(self.root + "/kv/summary", self.timeouts.connect)
        return response.json() if response.status_code == 200 else None

    async def tokenize(self, body: dict) -> list[int] | None:
        if self.engine in ("tgi", "llamacpp", "llama.cpp"):
            return None
        try:
            response = await self._client.post(self.root + "/tokenize", content=orjson.dumps(body),
                                               headers=self._headers, timeout=self.timeouts.connect)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            tokens = orjson.loads(response.content).get("tokens")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return tokens

    async def load_adapter(self, name: str, path: str) -> None:
        await self._post_admin("/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload_adapter(self, name: str) -> None:
        await self._post_admin("/unload_lora_adapter", {"lora_name": name})

    async def _post_admin(self, path: str, payload: dict) -> None:
        response = await self._client.post(self.base_url + path, content=orjson.dumps(payload),
                                           headers=self._headers, timeout=self.timeouts.total)
        if response.status_code >= 400:
            kind = UpstreamErrorKind.HTTP_4XX if response.status_code < 500 else UpstreamErrorKind.HTTP_5XX
            raise EngineError(kind, f"{path} answered {response.status_code}",
                              status=response.status_code, body=_error_body(response.content))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

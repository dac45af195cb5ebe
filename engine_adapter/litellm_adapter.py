"""EngineAdapter for hosted providers through the LiteLLM SDK (optional extra `hosted`).

Hosted providers return SDK objects, not raw SSE, so chunks are serialised here. litellm is
imported on first use: a gateway without hosted backends never pays its import cost.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, AsyncIterator

import orjson

from common.error_codes import UpstreamErrorKind
from engine_adapter.base import EngineAdapter, EngineError, EngineStream, LoadView


def _litellm() -> Any:
    # litellm fetches its model cost map from the internet when it is imported unless told to
    # use the copy it ships: a gateway must not reach out at run time (nor wait on it offline).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:  # the optional extra is not installed
        raise EngineError(UpstreamErrorKind.CONNECT,
                          "hosted backends need `pip install inferplane[hosted]`") from exc
    return litellm


def _dump(obj: Any) -> dict:
    return obj.model_dump() if hasattr(obj, "model_dump") else dict(obj)


class _LiteLLMStream(EngineStream):
    def __init__(self, first: Any, rest: AsyncIterator[Any]):
        self._first = first
        self._rest = rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            yield b"data: " + orjson.dumps(_dump(self._first)) + b"\n\n"
            async for chunk in self._rest:
                yield b"data: " + orjson.dumps(_dump(chunk)) + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        closer = getattr(self._rest, "aclose", None)
        if closer is not None:
            await closer()


class LiteLLMAdapter(EngineAdapter):
    """`model` is the provider's model string, e.g. "openai/gpt-4o-mini"."""

    def __init__(self, model: str, api_key: str | None = None, api_base: str | None = None,
                 first_token_timeout: float = 60.0, total_timeout: float = 600.0):
        self.model = model
        self._extra = {k: v for k, v in (("api_key", api_key), ("api_base", api_base)) if v}
        self._first_token_timeout = first_token_timeout
        self._total_timeout = total_timeout

    async def chat(self, body: dict) -> dict | EngineStream:
        return await self._call("acompletion", body)

    async def completions(self, body: dict) -> dict | EngineStream:
        return await self._call("atext_completion", body)

    async def _call(self, fn: str, body: dict) -> dict | EngineStream:
        litellm = _litellm()
        kwargs = {**body, **self._extra, "model": self.model, "timeout": self._total_timeout}
        try:
            result = await getattr(litellm, fn)(**kwargs)
            if not body.get("stream"):
                return _dump(result)
            iterator = result.__aiter__()
            first = await asyncio.wait_for(iterator.__anext__(), self._first_token_timeout)
        except TimeoutError as exc:
            raise EngineError(UpstreamErrorKind.FIRST_TOKEN_TIMEOUT, "hosted provider timed out") from exc
        except StopAsyncIteration as exc:
            raise EngineError(UpstreamErrorKind.PROTOCOL, "hosted provider sent an empty stream") from exc
        except EngineError:
            raise
        except Exception as exc:  # provider SDK errors carry an HTTP status when they have one
            status = getattr(exc, "status_code", None)
            kind = UpstreamErrorKind.HTTP_4XX if status and 400 <= status < 500 else UpstreamErrorKind.HTTP_5XX
            raise EngineError(kind, str(exc), status=status, body={"message": str(exc)}) from exc
        return _LiteLLMStream(first, iterator)

    async def health(self) -> bool:
        return True  # providers publish no health endpoint; failures surface via the breaker

    async def load(self) -> LoadView:
        return LoadView()

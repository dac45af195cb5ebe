"""A streamed (SSE) response that stops its body when the client disconnects.

The write that ends a stream (a `gateway.request_path.relay.Last`: `data: [DONE]` or an endpoint's closing
events) leaves in the same write as the chunked terminator, so the client has its whole answer
before the relay's closing bookkeeping runs. The request's scope is closed here too (a no-op
when the relay closed it): a stream abandoned before its body ever started still releases
everything it holds.

Starlette's StreamingResponse does the same under ASGI < 2.4 (uvicorn's httptools server) with
an anyio task group per response, a cost paid on every streamed request. Here a
DisconnectWatch (gateway/request_path/disconnect_watch.py) waits for `http.disconnect` and cancels the
streaming task; the cancellation reaches the body iterator (the relay), which accounts the
request as client-closed and aborts upstream.
"""
from __future__ import annotations

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.request_path.accounting import CLIENT_CLOSED
from gateway.request_path.disconnect_watch import DisconnectWatch
from gateway.request_path.relay import Last


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"
    _answered = False   # the final event went out: the response is complete

    def __init__(self, content, *, scope=None, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.scope = scope   # the RequestScope the body's relay closes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Cancels this task when the client leaves before the final event went out (a
        # complete response also reads as a disconnect); started only for a stream still
        # running after a few milliseconds, and its cancel always lands on an await in
        # stream_response, never after the body is done.
        watch = DisconnectWatch(receive, lambda: not self._answered)
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not watch.gone:
                raise
            asyncio.current_task().uncancel()
        finally:
            watch.stop()
            if self.scope is not None and not self.scope.closed:
                # Cancelled between two writes, or before the body started: the relay's own
                # end (a generator suspended at a yield) runs now, or the scope alone.
                await self.body_iterator.aclose()
                await self.scope.close(CLIENT_CLOSED)
        if self.background is not None:
            await self.background()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            if type(chunk) is Last:
                self._answered = True
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                async for _ in self.body_iterator:   # run the relay's end of stream bookkeeping
                    pass
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

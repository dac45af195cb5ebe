"""The fastest OpenAI-shaped engine we can serve from Python: a bare ASGI app (no framework)
under uvicorn + uvloop + httptools, answering every chat/completions call with a fixed body.

    python bench/_mock_engine.py --port P

Non-streaming calls get one JSON body; streaming calls get four token chunks, a usage chunk and
`data: [DONE]`, each sent as its own HTTP chunk as a real engine would. Its cost is the floor the
gateway overhead is measured against.
"""
from __future__ import annotations

import argparse
import time

import orjson

MODEL = "mock"
USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
COMPLETION = orjson.dumps({
    "id": "chatcmpl-mock", "object": "chat.completion", "created": int(time.time()),
    "model": MODEL, "usage": USAGE,
    "choices": [{"index": 0, "finish_reason": "length",
                 "message": {"role": "assistant", "content": "one two three four"}}]})


def _event(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    return _event({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                   "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]})


STREAM = [_chunk({"role": "assistant", "content": "one"}), _chunk({"content": " two"}),
          _chunk({"content": " three"}), _chunk({"content": " four"}, "length"),
          _event({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                  "model": MODEL, "choices": [], "usage": USAGE}),
          b"data: [DONE]\n\n"]

JSON_HEADERS = [(b"content-type", b"application/json"),
                (b"content-length", str(len(COMPLETION)).encode())]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
HEALTH = b'{"status":"ok"}'
METRICS = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"


async def _read_body(receive) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


async def _small(send, status: int, body: bytes, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if path in ("/health", "/v1/models"):
        await _small(send, 200, HEALTH, b"application/json")
        return
    if path == "/metrics":
        await _small(send, 200, METRICS, b"text/plain")
        return
    body = await _read_body(receive)
    try:
        stream = bool(orjson.loads(body).get("stream"))
    except (orjson.JSONDecodeError, AttributeError):
        await _small(send, 400, b'{"error":{"message":"invalid JSON"}}', b"application/json")
        return
    if not stream:
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": COMPLETION})
        return
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    for event in STREAM:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False, lifespan="on", backlog=4096)


if __name__ == "__main__":
    main()

"""An OpenAI-shaped engine that answers with the request's own text: the last chat message
(or the prompt), as one JSON body or streamed `--chunk` characters per SSE event, the way an
engine streams tokens. What the guardrails benchmark sends PII through both ways.

    python bench/_echo_engine.py --port P [--chunk 4]
"""
from __future__ import annotations

import argparse

import orjson

CHUNK = 4
USAGE = {"prompt_tokens": 250, "completion_tokens": 250, "total_tokens": 500}


def _event(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _text(body: dict) -> str:
    messages = body.get("messages")
    return messages[-1]["content"] if messages else body.get("prompt", "")


def _chunk(model: str, delta: dict, finish: str | None = None) -> bytes:
    return _event({"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": 0,
                   "model": model, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]})


def events(body: dict, chunk: int) -> list[bytes]:
    text, model = _text(body), body.get("model", "echo")
    out = [_chunk(model, {"role": "assistant", "content": ""})]
    out += [_chunk(model, {"content": text[i:i + chunk]}) for i in range(0, len(text), chunk)]
    out.append(_chunk(model, {}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(_event({"id": "chatcmpl-echo", "object": "chat.completion.chunk",
                           "created": 0, "model": model, "choices": [], "usage": USAGE}))
    return out + [b"data: [DONE]\n\n"]


def answer(body: dict) -> bytes:
    return orjson.dumps({
        "id": "chatcmpl-echo", "object": "chat.completion", "created": 0,
        "model": body.get("model", "echo"), "usage": USAGE,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": _text(body)}}]})


def make_app(chunk: int = CHUNK):
    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] in ("/health", "/v1/models", "/metrics"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        raw, more = b"", True
        while more:
            message = await receive()
            raw += message.get("body", b"")
            more = message.get("more_body", False)
        body = orjson.loads(raw)
        if not body.get("stream"):
            content = answer(body)
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": content})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for event in events(body, chunk):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunk", type=int, default=CHUNK)
    args = parser.parse_args()
    uvicorn.run(make_app(args.chunk), host="127.0.0.1", port=args.port, log_level="warning",
                loop="uvloop", http="httptools", access_log=False)


if __name__ == "__main__":
    main()

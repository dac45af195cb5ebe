"""A minimal OpenAI-compatible engine for fault and timing injection in gateway tests.

Run: python -m tests.gateway.fake_engine --port P --name NAME
Behaviour is changed at runtime with POST /control (JSON merged into the config) and observed
with GET /stats. It answers "tok0 tok1 ..." tokens; the real builtin engine is used elsewhere.
"""
from __future__ import annotations

import argparse
import asyncio
import time

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common.metric_names import EngineMetric

DEFAULTS = {
    "fail_status": None,       # answer every request with this HTTP status
    "fail_body": None,         # error JSON to send with fail_status
    "first_token_delay": 0.0,  # seconds before the first chunk / the response
    "token_delay": 0.0,        # seconds between chunks
    "break_after": None,       # drop the connection after this many token chunks
    "usage_in_stream": True,   # send the usage chunk when include_usage is asked
    "tool_arguments": "{}",    # a chat request with `tools` is answered with a call of the
}                              # first (or the named) tool with these arguments


class Engine:
    def __init__(self, name: str):
        self.name = name
        self.config = dict(DEFAULTS)
        self.stats = {"requests": 0, "cancelled": 0, "completed": 0, "running": 0,
                      "last_body": None}

    def tokens(self, body: dict) -> list[str]:
        n = body.get("max_tokens") or 5
        return [f"tok{i} " for i in range(n)]

    def prompt_tokens(self, body: dict) -> int:
        if "messages" in body:
            return sum(len(str(m.get("content", "")).split()) for m in body["messages"]) + 1
        return len(str(body.get("prompt", "")).split()) + 1

    def chunk(self, body: dict, chat: bool, text: str | None, finish: str | None = None,
              role: bool = False) -> bytes:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta if text is not None or role else {},
                      "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish}
            obj = "text_completion"
        payload = {"id": "cmpl-1", "object": obj, "created": int(time.time()),
                   "model": body.get("model"), "backend": self.name, "choices": [choice]}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def tool_call(self, body: dict) -> dict | None:
        """The tool call answering `body`: when it offers tools and its last message is not
        a tool's result (which is answered with text quoting it)."""
        messages = body.get("messages") or [{}]
        if not body.get("tools") or body.get("tool_choice") == "none" \
                or messages[-1].get("role") == "tool":
            return None
        choice = body.get("tool_choice")
        name = choice["function"]["name"] if isinstance(choice, dict) \
            else body["tools"][0]["function"]["name"]
        return {"id": f"call_{self.stats['requests']}", "type": "function",
                "function": {"name": name, "arguments": self.config["tool_arguments"]}}

    def tool_chunks(self, body: dict, call: dict) -> list[bytes]:
        args = call["function"]["arguments"]
        half = len(args) // 2
        first = {"index": 0, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": args[:half]}}
        pieces = [first, {"index": 0, "function": {"arguments": args[half:]}}]
        return [b"data: " + orjson.dumps({
            "id": "cmpl-1", "object": "chat.completion.chunk", "model": body.get("model"),
            "choices": [{"index": 0, "delta": {"tool_calls": [p]}, "finish_reason": None}]})
            + b"\n\n" for p in pieces]

    def usage(self, body: dict) -> dict:
        p, c = self.prompt_tokens(body), len(self.tokens(body))
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


async def finished_before_disconnect(request: Request, seconds: float) -> bool:
    """Sleep `seconds`; True if the client disconnected first."""
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait_for(asyncio.shield(watch), seconds)
        return True
    except TimeoutError:
        return False
    finally:
        watch.cancel()


def build_app(name: str) -> Starlette:
    engine = Engine(name)

    def injected_failure(body: dict) -> Response | None:
        """Counts the request; the configured failure, if any."""
        cfg = engine.config
        engine.stats["requests"] += 1
        engine.stats["last_body"] = body
        if cfg["fail_status"]:
            error = cfg["fail_body"] or {"error": {"message": f"injected {cfg['fail_status']}",
                                                   "type": "server_error", "code": None}}
            return JSONResponse(error, status_code=cfg["fail_status"])
        return None

    async def generate(request: Request, chat: bool) -> Response:
        body = await request.json()
        cfg = engine.config
        if (failed := injected_failure(body)) is not None:
            return failed
        if "TOO_LONG" in orjson.dumps(body).decode():
            return JSONResponse({"object": "error", "message": "prompt is too long for the model",
                                 "type": "BadRequestError", "param": None, "code": 400},
                                status_code=400)
        if body.get("stream"):
            return StreamingResponse(stream(body, chat), media_type="text/event-stream")
        engine.stats["running"] += 1
        try:
            # Like vLLM, abort a non-streaming request when its client goes away.
            if await finished_before_disconnect(request, cfg["first_token_delay"]
                                                + cfg["token_delay"] * 3):
                engine.stats["cancelled"] += 1
                return Response(status_code=499)
        finally:
            engine.stats["running"] -= 1
        text = "".join(engine.tokens(body))
        call, finish = engine.tool_call(body) if chat else None, "length"
        if call is None and chat and (body.get("messages") or [{}])[-1].get("role") == "tool":
            text, finish = "tool said: " + str(body["messages"][-1].get("content")), "stop"
        choice = ({"index": 0, "message": {"role": "assistant", "content": None,
                                           "tool_calls": [call]}, "finish_reason": "tool_calls"}
                  if call else
                  {"index": 0, "message": {"role": "assistant", "content": text},
                   "finish_reason": finish} if chat else
                  {"index": 0, "text": text, "finish_reason": "length"})
        engine.stats["completed"] += 1
        return JSONResponse({"id": "cmpl-1", "object": "chat.completion" if chat else
                             "text_completion", "created": int(time.time()),
                             "model": body.get("model"), "backend": name, "choices": [choice],
                             "usage": engine.usage(body)})

    async def stream(body: dict, chat: bool):
        cfg = engine.config
        engine.stats["running"] += 1
        try:
            await asyncio.sleep(cfg["first_token_delay"])
            if chat:
                yield engine.chunk(body, chat, None, role=True)
            call = engine.tool_call(body) if chat else None
            if call is not None:
                for piece in engine.tool_chunks(body, call):
                    yield piece
            for i, tok in enumerate(engine.tokens(body) if call is None else ()):
                if cfg["break_after"] is not None and i >= cfg["break_after"]:
                    raise RuntimeError("injected connection drop")
                yield engine.chunk(body, chat, tok)
                await asyncio.sleep(cfg["token_delay"])
            yield engine.chunk(body, chat, None if chat else "",
                               finish="tool_calls" if call else "length")
            if (body.get("stream_options") or {}).get("include_usage") and cfg["usage_in_stream"]:
                yield b"data: " + orjson.dumps({"id": "cmpl-1", "object": "chat.completion.chunk",
                                                "model": body.get("model"), "choices": [],
                                                "usage": engine.usage(body)}) + b"\n\n"
            yield b"data: [DONE]\n\n"
            engine.stats["completed"] += 1
        except asyncio.CancelledError:
            engine.stats["cancelled"] += 1
            raise
        finally:
            engine.stats["running"] -= 1

    async def chat_route(request: Request) -> Response:
        return await generate(request, True)

    async def completions_route(request: Request) -> Response:
        return await generate(request, False)

    async def embeddings_route(request: Request) -> Response:
        """Unit 4-dimensional vectors, one per input; a word is a token."""
        body = await request.json()
        if (failed := injected_failure(body)) is not None:
            return failed
        value = body.get("input")
        inputs = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) \
            else value
        tokens = sum(len(i.split()) if isinstance(i, str) else len(i) for i in inputs)
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.5, 0.5, 0.5]}
                for i in range(len(inputs))]
        return JSONResponse({"object": "list", "data": data, "model": body.get("model"),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def control(request: Request) -> Response:
        update = await request.json()
        if update.get("reset"):
            engine.config = dict(DEFAULTS)
            engine.stats.update(requests=0, cancelled=0, completed=0, last_body=None)
        engine.config.update({k: v for k, v in update.items() if k in DEFAULTS})
        return JSONResponse(engine.config)

    async def stats(request: Request) -> Response:
        return JSONResponse(engine.stats)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:   # what health probes read
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"}]})

    async def metrics(request: Request) -> Response:
        text = (f"{EngineMetric.NUM_REQUESTS_RUNNING} {engine.stats['running']}\n"
                f"{EngineMetric.NUM_REQUESTS_WAITING} 0\nvllm:kv_cache_usage_perc 0.1\n")
        return Response(text, media_type="text/plain")

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", completions_route, methods=["POST"]),
        Route("/v1/embeddings", embeddings_route, methods=["POST"]),
        Route("/control", control, methods=["POST"]),
        Route("/stats", stats), Route("/health", health), Route("/metrics", metrics),
        Route("/v1/models", models),
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="engine")
    args = parser.parse_args()
    uvicorn.run(build_app(args.name), host="127.0.0.1", port=args.port, log_level="warning",
                loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()

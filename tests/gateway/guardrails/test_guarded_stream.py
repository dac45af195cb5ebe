"""The guarded stream on its own: events in, events out, for the shapes engines send (chat
and completion chunks, a usage chunk, no finish chunk at all)."""
from __future__ import annotations

import asyncio

import orjson

from engine_adapter.base import EngineStream
from gateway.guardrails.guarded_stream import GuardedStream
from gateway.guardrails.policy import CompiledPolicy
from gateway.guardrails.request_guard import RequestGuard
from gateway.observability.metrics import GatewayMetrics

METRICS = GatewayMetrics()


class Replay(EngineStream):
    def __init__(self, events: list[bytes]):
        self.events, self.closed = events, False

    async def _gen(self):
        for event in self.events:
            yield event

    def __aiter__(self):
        return self._gen()

    async def aclose(self) -> None:
        self.closed = True


def chat_events(text: str, finish: bool = True, size: int = 3) -> list[bytes]:
    def event(delta, reason=None):
        return b"data: " + orjson.dumps({"id": "x", "object": "chat.completion.chunk",
                                         "choices": [{"index": 0, "delta": delta,
                                                      "finish_reason": reason}]}) + b"\n\n"
    out = [event({"role": "assistant", "content": ""})]
    out += [event({"content": text[i:i + size]}) for i in range(0, len(text), size)]
    if finish:
        out.append(event({}, "stop"))
    out.append(b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":1}}\n\n')
    return out + [b"data: [DONE]\n\n"]


def run(spec: dict, events: list[bytes]) -> tuple[str, list[dict], list[bytes]]:
    guard = RequestGuard(CompiledPolicy.of("p", spec), "m", METRICS)

    async def collect():
        return [e async for e in GuardedStream(Replay(events), guard)]
    out = asyncio.run(collect())
    assert out[-1] == b"data: [DONE]\n\n"
    datas = [orjson.loads(e[len(b"data: "):]) for e in out[:-1]]
    text = "".join((c.get("delta") or {}).get("content") or c.get("text") or ""
                   for d in datas for c in d["choices"])
    return text, datas, out


def test_masked_with_and_without_a_finish_chunk():
    for finish in (True, False):
        text, datas, _ = run({"pii": {"email": "mask"}},
                             chat_events("write to someone@example.com", finish))
        assert text == "write to [EMAIL]"
        assert datas[-1]["usage"] == {"prompt_tokens": 1}    # the usage chunk passes


def test_blocked_in_the_held_tail_is_never_sent():
    for finish in (True, False):
        text, datas, _ = run({"pii": {"card": "block"}},
                             chat_events("ok 4111 1111 1111 1111", finish))
        assert "4111" not in text
        reasons = [c["finish_reason"] for d in datas for c in d["choices"]]
        assert "content_filter" in reasons


def test_completion_chunks():
    events = [b"data: " + orjson.dumps({"choices": [{"index": 0, "text": piece,
                                                     "finish_reason": None}]}) + b"\n\n"
              for piece in ("ip 10.0", ".0.1 and", " more")]
    text, _, _ = run({"pii": {"ip": "mask"}}, events + [b"data: [DONE]\n\n"])
    assert text == "ip [IP] and more"


def test_ready_events_are_transformed_too():
    class Batched(Replay):
        """Gives the first event by iteration and the rest as already received."""
        def __init__(self, events):
            super().__init__(events)
            self.rest = events[1:]

        async def _gen(self):
            yield self.events[0]

        def ready_events(self):
            rest, self.rest = self.rest, []
            return rest

    guard = RequestGuard(CompiledPolicy.of("p", {"pii": {"email": "mask"}}), "m", METRICS)
    stream = GuardedStream(Batched(chat_events("a@example.com b")), guard)

    async def collect():
        out = [e async for e in stream]
        return out + stream.ready_events()
    out = asyncio.run(collect())
    assert b"a@example.com" not in b"".join(out) and b"[EMAIL]" in b"".join(out)
    assert out[-1] == b"data: [DONE]\n\n"

"""One stored answer, as the engine gave it: a JSON body, or the SSE events of a stream.

    answer = CachedAnswer.json(result_bytes, served_model="qwen")   # a non-streamed answer
    answer = CachedAnswer.sse([b"data: {...}\\n\\n", ..., b"data: [DONE]\\n\\n"], "qwen")
    CachedAnswer.decode(answer.encode()) == answer                  # what the stores hold

The engine's form (not the client's) is kept so a hit goes through the same endpoint
translation as a fresh answer: a chat answer stored for /v1/chat/completions replays as well
for /v1/responses, and the model is renamed to what this client asked for.
"""
from __future__ import annotations

from dataclasses import dataclass

JSON, SSE = b"J", b"S"
EVENT_END = b"\n\n"


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    kind: bytes            # JSON | SSE
    served_model: str      # the model name in the stored events (renamed on replay)
    payload: bytes         # the JSON body, or the events back to back

    @classmethod
    def json(cls, body: bytes, served_model: str) -> CachedAnswer:
        return cls(JSON, served_model, body)

    @classmethod
    def sse(cls, events: list[bytes], served_model: str) -> CachedAnswer:
        return cls(SSE, served_model, b"".join(
            e if e.endswith(EVENT_END) else e.rstrip(b"\n") + EVENT_END for e in events))

    @property
    def streamed(self) -> bool:
        return self.kind == SSE

    def events(self) -> list[bytes]:
        """The stored stream's events, each ending in a blank line."""
        return [part + EVENT_END for part in self.payload.split(EVENT_END) if part]

    def encode(self) -> bytes:
        return self.kind + self.served_model.encode() + b"\n" + self.payload

    @classmethod
    def decode(cls, raw: bytes) -> CachedAnswer | None:
        """None for bytes that are not an answer (another release's format)."""
        head, sep, payload = raw[1:].partition(b"\n")
        if not sep or raw[:1] not in (JSON, SSE):
            return None
        return cls(raw[:1], head.decode(), payload)

    def __len__(self) -> int:
        return len(self.payload) + len(self.served_model) + 2

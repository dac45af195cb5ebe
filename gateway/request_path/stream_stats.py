"""What one answer measured on its way out: chunk timings, engine-reported usage, its text.

    stats = StreamStats(itl_of=lambda: metrics.itl.labels(model))
    stats.first_token()                 # TTFT mark (the first chunk)
    stats.chunk()                       # every later chunk: its gap goes to the ITL histogram
    stats.usage({"prompt_tokens": 12, "completion_tokens": 30})
    stats.tokens(prompt_estimate=12, failed=False, stream=True)   # (prompt, completion)
"""
from __future__ import annotations

import time
from typing import Callable


class StreamStats:
    __slots__ = ("first_token_at", "last_chunk_at", "chunks", "prompt_tokens",
                 "completion_tokens", "text_parts", "_itl", "_itl_of")

    def __init__(self, itl_of: Callable[[], object]):
        self.first_token_at: float | None = None
        self.last_chunk_at: float | None = None
        self.chunks = 0
        self.prompt_tokens: int | None = None       # engine-reported
        self.completion_tokens: int | None = None
        self.text_parts: list[str] | None = None    # the answer, kept only when compared
        self._itl = None          # the ITL histogram child, looked up once per stream
        self._itl_of = itl_of

    def first_token(self) -> None:
        self.first_token_at = self.last_chunk_at = time.perf_counter()
        self.chunks = 1

    def chunk(self) -> None:
        now = time.perf_counter()
        if self.last_chunk_at is not None:
            if self._itl is None:
                self._itl = self._itl_of()
            self._itl.observe(now - self.last_chunk_at)
        self.last_chunk_at = now
        self.chunks += 1

    def usage(self, usage: dict | None) -> None:
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)

    def collect_text(self) -> None:
        """Keep the answer's text (a shadow copy compares against it)."""
        if self.text_parts is None:
            self.text_parts = []

    def text(self) -> str | None:
        return None if self.text_parts is None else "".join(self.text_parts)

    def tokens(self, prompt_estimate: int, failed: bool, stream: bool) -> tuple[int, int]:
        """Engine-reported usage; estimates when the engine reported none (nothing for a
        failure before the first token)."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens, self.completion_tokens or 0
        if failed and self.first_token_at is None:
            return 0, 0
        return prompt_estimate, max(0, self.chunks - 1) if stream else 0

"""Token estimates for TPM reservations made before the engine has counted anything."""
from __future__ import annotations

import math
from typing import Any, Iterable

# Chat templates wrap each message in role markers; about this many tokens per message.
MESSAGE_OVERHEAD_TOKENS = 4


class TokenEstimator:
    """Counts with a tokenizer when one is given (a `tokenizers.Tokenizer`, or anything whose
    `encode(text)` returns ids or an object with `.ids`), else ceil(chars / chars_per_token)."""

    def __init__(self, tokenizer: Any | None = None, chars_per_token: float = 4.0) -> None:
        if chars_per_token <= 0:
            raise ValueError("chars_per_token must be > 0")
        self.tokenizer = tokenizer
        self.chars_per_token = chars_per_token

    @classmethod
    def from_file(cls, tokenizer_json: str) -> "TokenEstimator":
        from tokenizers import Tokenizer
        return cls(Tokenizer.from_file(tokenizer_json))

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if self.tokenizer is None:
            return math.ceil(len(text) / self.chars_per_token)
        encoded = self.tokenizer.encode(text)
        return len(encoded.ids) if hasattr(encoded, "ids") else len(encoded)

    def count_messages(self, messages: Iterable[dict]) -> int:
        """Chat messages in OpenAI shape; content may be a string or a list of parts."""
        total = 0
        for message in messages:
            total += MESSAGE_OVERHEAD_TOKENS + self.count_text(_message_text(message))
        return total

    def count_prompt(self, prompt: str | list[str]) -> int:
        if isinstance(prompt, str):
            return self.count_text(prompt)
        return sum(self.count_text(p) for p in prompt)


def reservation_tokens(prompt_tokens: int, max_tokens: int | None, default_max_tokens: int,
                       context_length: int | None = None) -> int:
    """What to reserve for TPM: the prompt plus the most the request may generate. Without
    max_tokens, generation is bounded by the model's context (or a default)."""
    completion = max_tokens if max_tokens is not None else default_max_tokens
    if context_length is not None:
        completion = min(completion, max(0, context_length - prompt_tokens))
    return prompt_tokens + max(0, completion)


def _message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and part.get("type") == "text")
    return ""

"""Case adjustments the fuzzer makes before sending (schemathesis generates, these steer).

    admin_guard(protected_key_id)(case)   # never revoke, rotate or demote the fuzzer's own key
    openai_target("fake")(case)           # most /v1 bodies name the served model

The fake engine answers `max_tokens` tokens, so the token counts of schema-valid bodies are
capped to keep each case fast; everything else is sent as generated.
"""
from __future__ import annotations

import random

MAX_FAKE_TOKENS = 8


def admin_guard(protected_key_id: int):
    def prepare(case) -> None:
        params = case.path_parameters or {}
        if params.get("key_id") == protected_key_id:
            params["key_id"] = protected_key_id + 100_000
    return prepare


def openai_target(model: str, share: float = 0.7, seed: int = 0):
    rng = random.Random(seed)

    def prepare(case) -> None:
        body = case.body
        if not isinstance(body, dict):
            return
        if rng.random() < share:
            body["model"] = rng.choice([model, f"{model}:prod", f"{model}:lora1"])
        for field in ("max_tokens", "max_completion_tokens", "min_tokens"):
            value = body.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_FAKE_TOKENS:
                body[field] = MAX_FAKE_TOKENS
    return prepare

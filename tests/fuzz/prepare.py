"""Case adjustments the fuzzer makes before sending (schemathesis generates, these steer).

    admin_guard(protected_key_id)(case)   # never revoke, rotate or demote the fuzzer's own key
    openai_target("fake")(case)           # most /v1 bodies name the served model

The fake engine answers `max_tokens` tokens, so the token counts of schema-valid bodies are
capped to keep each case fast; everything else is sent as generated.
"""
from __future__ import annotations

import zlib

MAX_FAKE_TOKENS = 8


def admin_guard(protected_key_id: int):
    def prepare(case) -> None:
        params = case.path_parameters or {}
        if params.get("key_id") == protected_key_id:
            params["key_id"] = protected_key_id + 100_000
    return prepare


def openai_target(model: str, share: float = 0.7):
    names = [model, f"{model}:prod", f"{model}:lora1"]

    def prepare(case) -> None:
        body = case.body
        if not isinstance(body, dict):
            return
        # the choice follows from the case, so a replayed case is sent exactly as before
        draw = zlib.crc32(repr(sorted(body.items(), key=lambda kv: str(kv[0]))).encode())
        if draw % 1000 < share * 1000:
            body["model"] = names[draw % len(names)]
        for field in ("max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens"):
            value = body.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value > MAX_FAKE_TOKENS:
                body[field] = MAX_FAKE_TOKENS
    return prepare

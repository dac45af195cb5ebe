"""Resuming a stream whose backend failed mid-way on another backend of the same model.

The client has already received part of the answer, so the gateway cannot retry from the
start. It asks another backend to continue the text instead, as the engine protocol says
(`EngineProtocol.continuation`): a completion's prompt grows by the text sent so far, a chat
gets the partial answer as a final assistant message with vLLM's `continue_final_message`
(understood by vLLM, SGLang and the builtin engine). For a greedy request (temperature 0) the
continuation is the text the failed backend would have produced, so by default
(`resume_streams: greedy`) only those resume; `always` resumes sampled requests too, `off`
never does (the stream ends with an error event).

    may_resume("greedy", CHAT, body)                 # True / False
    continuation_body(CHAT, body, "sent", 4)         # the next request, or None: nothing left
"""
from __future__ import annotations

from typing import Literal

ResumeMode = Literal["off", "greedy", "always"]
# Fields whose meaning does not survive a continuation (choices, token offsets, tool calls).
UNRESUMABLE_FIELDS = ("logprobs", "top_logprobs", "tools", "functions", "response_format",
                      "echo", "best_of", "suffix")


def may_resume(mode: ResumeMode, protocol, body: dict) -> bool:
    """Whether this request allows a continuation on another backend at all."""
    if mode == "off" or body.get("n", 1) != 1:
        return False
    if any(body.get(name) for name in UNRESUMABLE_FIELDS):
        return False
    if not protocol.resumable(body):
        return False
    return mode == "always" or body.get("temperature") == 0


def continuation_body(protocol, body: dict, sent_text: str, sent_tokens: int) -> dict | None:
    """The request that continues after `sent_text`, or None when nothing is left to generate."""
    out = dict(body)
    for name in ("max_tokens", "max_completion_tokens"):
        if out.get(name):
            out[name] = out[name] - sent_tokens
            if out[name] < 1:
                return None
    if out.get("min_tokens"):
        out["min_tokens"] = max(0, out["min_tokens"] - sent_tokens)
    return protocol.continuation(out, sent_text)

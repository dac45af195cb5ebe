"""Precise prefix-aware routing: the engines' resident KV blocks and the prompt's token ids.

The load poller calls `refresh_resident` for every builtin backend (GET /kv/summary). Before a
request is routed, `tokenize_for_routing` asks one candidate engine for the prompt's token ids
(POST /tokenize, vLLM format); the prefix_aware strategy then scores backends by the leading
blocks they really hold. Any gap (setting off, another strategy, engines without these
endpoints, a LoRA adapter whose blocks hash differently) leaves ctx.token_ids unset, and the
approximate text index routes instead.
"""
from __future__ import annotations

import asyncio
import logging

from common.vocabulary import RoutingStrategy

log = logging.getLogger("inferplane.gateway")
TOKENIZE_TIMEOUT_S = 2.0


async def refresh_resident(state, backend) -> None:
    try:
        async with asyncio.timeout(max(0.5, state.settings.routing.load_poll_interval_s)):
            summary = await state.adapters.get(backend).kv_summary()
    except Exception as exc:   # a backend that cannot say is routed approximately
        log.debug("kv summary of %s failed: %r", backend.id, exc)
        summary = None
    state.router.resident.update(backend.id, summary)


def wants_precise(state, model_view, adapter: str | None) -> bool:
    return (state.settings.routing.prefix_precise and not adapter
            and state.router.strategy_name(model_view) == RoutingStrategy.PREFIX_AWARE)


async def tokenize_for_routing(state, call, model_view, backends) -> bool:
    """Fill call.ctx.token_ids from an engine that reports resident blocks; True on success."""
    if not wants_precise(state, model_view, call.adapter):
        return False
    resident = state.router.resident
    known = [b for b in state.router.candidates(backends) if resident.knows(b.id)]
    if not known:
        return False
    target = min(known, key=lambda b: (state.router.book.load(b.id), b.id))
    request = call.protocol.tokenize_body(call.body, target.served_model)
    if request is None:
        return False
    tokens = await engine_tokens(state, target, request)
    call.ctx.token_ids = tokens
    return tokens is not None


async def engine_tokens(state, backend, request) -> list[int] | None:
    """The token ids of a tokenize request (already ids: as they are) from `backend`'s
    /tokenize, or None when it does not answer within TOKENIZE_TIMEOUT_S."""
    if isinstance(request, list):
        return request
    try:
        async with asyncio.timeout(TOKENIZE_TIMEOUT_S):
            return await state.adapters.get(backend).tokenize(request)
    except TimeoutError:
        return None


async def engine_token_count(state, protocol, model_view, body: dict) -> int | None:
    """The prompt's length in the model's tokens, from one of two ready backends' /tokenize;
    None when neither answers in time (or the protocol has nothing to tokenize)."""
    for backend in state.router.candidates(model_view.backends)[:2]:
        request = protocol.tokenize_body(body, backend.served_model)
        if request is None:
            return None
        tokens = await engine_tokens(state, backend, request)
        if tokens is not None:   # else a slow engine: the next one, or the estimate
            return len(tokens)
    return None

"""Shadow traffic: copies of live requests sent to a shadow version, compared, never served.

A model's splits may include `SplitView(version, weight, shadow=True)`: that share of its
requests is copied, in the background, to a ready backend of the shadow version. The copy:

- starts after the primary is admitted and never holds the primary's admission slot;
- is dropped (outcome "dropped") when `ShadowSettings.max_concurrent` copies already run;
- is always streamed, so the shadow's TTFT and latency are measured like a client's;
- ends in `GatewayMetrics.shadow_record`: inferplane_shadow_requests_total{outcome},
  inferplane_shadow_request_duration_seconds / _time_to_first_token_seconds{model,version},
  inferplane_shadow_similarity and inferplane_shadow_length_ratio against the primary's text.

Client-facing families (inferplane_requests_total, ...) never count shadow copies, so request
totals, SLO error budgets and alerts stay what clients saw.
"""
from __future__ import annotations

import random
import time

from common.error_codes import UpstreamErrorKind
from engine_adapter.base import EngineError
from gateway.request_path.relay import is_done, payload
from gateway.request_path.resolve import shadow_versions
from gateway.routing.strategies import least_loaded
from gateway.traffic.splits import ShadowReply


def start_shadows(state, call, model_view, serving_version: str | None,
                  rng: random.Random | None = None) -> int:
    """Mirror `call` to each sampled shadow split; returns how many copies started."""
    if not state.settings.shadow.enabled:
        return 0
    started = 0
    for split in shadow_versions(model_view):
        if split.version == serving_version or (rng or random).random() >= split.weight:
            continue
        if not state.router.candidates(model_view.backends_for(split.version)):
            state.metrics.shadow_requests.labels(model_view.name, split.version,
                                                 "no_backend").inc()
            continue
        handle = state.shadow.mirror(
            lambda v=split.version: send_copy(state, call, model_view, v),
            model_view.name, split.version)
        if handle is None:
            state.metrics.shadow_requests.labels(model_view.name, split.version, "dropped").inc()
            continue
        started += 1
        call.scope.stats.collect_text()
        call.scope.on_close(_report_primary, call.scope, handle)
    return started


def _report_primary(scope, handle) -> None:
    """The primary's answer (None when it failed) for the copy to be compared against."""
    handle.set_primary(scope.stats.text() if scope.status < 400 else None,
                       time.perf_counter() - scope.started)


def _copy_body(call, backend) -> dict:
    body = call.protocol.upstream_body(call.body, call.adapter or backend.served_model, False)
    body["stream"] = True
    body.pop("stream_options", None)
    return body


async def send_copy(state, call, model_view, version: str) -> ShadowReply:
    """Stream one copy to the least loaded ready backend of `version`; its text and TTFT."""
    candidates = state.router.candidates(model_view.backends_for(version))
    if not candidates:
        raise EngineError(UpstreamErrorKind.CONNECT, f"no ready backend for shadow version {version!r}")
    backend = least_loaded(candidates, state.router.book)
    adapter = state.adapters.get(backend)
    started = time.perf_counter()
    state.router.book.acquire(backend.id)
    try:
        stream = await call.protocol.call(adapter, _copy_body(call, backend))
        return await _read_reply(stream, started, call.protocol.delta_text)
    finally:
        state.router.book.release(backend.id)


async def _read_reply(stream, started: float, delta_text) -> ShadowReply:
    parts: list[str] = []
    ttft = None
    try:
        async for event in stream:
            if is_done(event):
                return ShadowReply("".join(parts), ttft)
            data = payload(event)
            if data is not None and "error" in data:
                raise EngineError(UpstreamErrorKind.PROTOCOL, f"shadow stream failed: {data['error']}")
            text = delta_text(data)
            if text:
                ttft = time.perf_counter() - started if ttft is None else ttft
                parts.append(text)
    finally:
        await stream.aclose()
    raise EngineError(UpstreamErrorKind.PROTOCOL, "shadow stream ended before [DONE]")

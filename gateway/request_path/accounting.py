"""The account stage: what a finished request leaves behind (metrics, access log, usage row).

    account(scope)    # run by RequestScope.close, after every resource was released
"""
from __future__ import annotations

import logging
import time
import uuid

from common.logging_setup import write_info
from common.metric_names import NO_TEAM, NO_VERSION
from common.request_context import current_request_id
from common.tracing import current_trace_id
from common.usage_record import UsageRecord

log = logging.getLogger("inferplane.gateway.access")
CLIENT_CLOSED = 499  # nginx's code for "client closed the request": bounded and well known


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def account(scope) -> None:
    """Metrics, the access log line and the usage record of a finished request."""
    services = scope.services
    m = services.metrics
    model, version, backend = scope.requested, scope.version, scope.last_backend
    duration = time.perf_counter() - scope.started
    series = m.series(model, version)
    series.code(scope.status).inc()
    series.duration.observe(duration)
    if scope.stats.first_token_at is not None:
        series.ttft.observe(scope.stats.first_token_at - scope.started)
    prompt, completion = scope.tokens()
    if completion > 1 and scope.stats.first_token_at is not None and scope.stats.last_chunk_at is not None:
        series.tpot.observe((scope.stats.last_chunk_at - scope.stats.first_token_at) / (completion - 1))
    if prompt or completion:
        series.prompt.inc(prompt)
        series.completion.inc(completion)
    cost = scope.cost(prompt, completion)
    principal = scope.principal
    if cost:
        m.spend.labels(model, principal.team or NO_TEAM).inc(cost)
    status = "ok" if scope.status < 400 else (
        "aborted" if scope.status == CLIENT_CLOSED else "error")
    if log.isEnabledFor(logging.INFO):   # the line's fields are not built when it is off
        write_info(log, "request finished", {
            "request_id": current_request_id(), "model": model, "status": scope.status,
            "backend": backend.id if backend is not None else None,
            "tokens": prompt + completion, "latency_ms": round(duration * 1000, 1)})
    services.emit_usage(UsageRecord(
        request_id=current_request_id() or uuid.uuid4().hex, key_id=principal.key_id,
        team=principal.team, model=model, version=None if version == NO_VERSION else version,
        backend=backend.id if backend is not None else None, prompt_tokens=prompt,
        completion_tokens=completion, cost_usd=cost, latency_ms=duration * 1000,
        ttft_ms=None if scope.stats.first_token_at is None else
        (scope.stats.first_token_at - scope.started) * 1000,
        status=status, http_status=scope.status, stream=scope.stream,
        trace_id=current_trace_id(), cache=scope.cache,
        bodies=None if scope.guard is None else scope.guard.finish(scope)))

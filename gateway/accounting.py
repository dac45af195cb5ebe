"""Per-request bookkeeping: timings, usage, metrics, in-flight counters, usage records.

One `Accounting` follows a request from the backend pick to its last byte; `finish` runs
exactly once whatever the outcome (success, upstream failure, client gone).
"""
from __future__ import annotations

import logging
import time
import uuid

from gateway.request_context import current_request_id
from gateway.state import GatewayState
from gateway.tracing import current_trace_id
from gateway.usage_record import UsageRecord

log = logging.getLogger("inferplane.gateway.access")
CLIENT_CLOSED = 499  # nginx's code for "client closed the request": bounded and well known


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class Accounting:
    def __init__(self, state: GatewayState, principal, requested: str, stream: bool,
                 started: float, prompt_estimate: int):
        self.state = state
        self.principal = principal
        self.requested = requested
        self.stream = stream
        self.started = started
        self.prompt_estimate = prompt_estimate
        self.model_view = None
        self.backend = None
        self.version = "none"
        self.first_token_at: float | None = None
        self.last_chunk_at: float | None = None
        self.chunks = 0
        self._itl = None       # the ITL histogram of this model, looked up once per stream
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.status = 200
        self.error_kind: str | None = None
        self.permit = None     # breaker permit of the current backend
        self.ticket = None     # admission ticket
        self.upstream = None   # UpstreamTrace of the current engine call
        self.text_parts: list[str] | None = None  # the answer, kept only when compared
        self._finished = False
        self.on_finish = []  # callables(acct) run at finish (limits reconcile, admission release)

    # -- routing -------------------------------------------------------------
    def bind(self, model_view, backend) -> None:
        """The request now runs on `backend`: count it in flight there."""
        self.model_view = model_view
        self.backend = backend
        self.version = backend.version or "none"
        self.state.router.book.acquire(backend.id)
        if self.ticket is not None:
            self.ticket.bind(backend.id)
        self.state.metrics.inflight.labels(model_view.name, backend.id).inc()

    def unbind(self) -> None:
        if self.backend is not None:
            self.state.router.book.release(self.backend.id)
            self.state.metrics.inflight.labels(self.model_view.name, self.backend.id).dec()
            self.backend = None

    # -- streaming timings ---------------------------------------------------
    def first_token(self) -> None:
        now = time.perf_counter()
        self.first_token_at = self.last_chunk_at = now
        self.chunks = 1

    def chunk(self) -> None:
        now = time.perf_counter()
        if self.last_chunk_at is not None:
            if self._itl is None:
                self._itl = self.state.metrics.itl.labels(self.requested)
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

    # -- outcome -------------------------------------------------------------
    def upstream_error(self, backend, kind: str) -> None:
        self.state.metrics.upstream_errors.labels(self.requested, backend.id, kind).inc()
        self._report(ok=kind == "http_4xx")   # a 4xx means the engine is healthy

    def upstream_ok(self) -> None:
        self._report(ok=True)

    def _report(self, ok: bool) -> None:
        if self.permit is not None:
            self.permit.success() if ok else self.permit.failure()
            self.permit.close()
            self.permit = None

    def finish(self, status: int | None = None) -> None:
        if self._finished:
            return
        self._finished = True
        if status is not None:
            self.status = status
        backend = self.backend
        if self.permit is not None:   # no outcome (client gone): frees a half-open probe slot
            self.permit.close()
            self.permit = None
        self.unbind()
        if self.upstream is not None:
            self.upstream.end(self.status, self.chunks if self.stream else None)
        self._observe(backend)
        for callback in self.on_finish:
            callback(self)

    def _observe(self, backend) -> None:
        m = self.state.metrics
        model, version = self.requested, self.version
        duration = time.perf_counter() - self.started
        m.requests.labels(model, version, str(self.status)).inc()
        m.request_duration.labels(model, version).observe(duration)
        if self.first_token_at is not None:
            m.ttft.labels(model, version).observe(self.first_token_at - self.started)
        prompt, completion = self.tokens()
        if completion > 1 and self.first_token_at is not None and self.last_chunk_at is not None:
            m.tpot.labels(model, version).observe(
                (self.last_chunk_at - self.first_token_at) / (completion - 1))
        if prompt or completion:
            m.tokens.labels(model, version, "prompt").inc(prompt)
            m.tokens.labels(model, version, "completion").inc(completion)
        cost = self.cost(prompt, completion)
        if cost:
            m.spend.labels(model, self.principal.team or "none").inc(cost)
        status = "ok" if self.status < 400 else (
            "aborted" if self.status == CLIENT_CLOSED else "error")
        log.info("request finished", extra={
            "request_id": current_request_id(), "model": model, "status": self.status,
            "backend": backend.id if backend is not None else None,
            "tokens": prompt + completion, "latency_ms": round(duration * 1000, 1)})
        self.state.emit_usage(UsageRecord(
            request_id=current_request_id() or uuid.uuid4().hex, key_id=self.principal.key_id,
            team=self.principal.team,
            model=model, version=None if version == "none" else version,
            backend=backend.id if backend is not None else None, prompt_tokens=prompt,
            completion_tokens=completion, cost_usd=cost, latency_ms=duration * 1000,
            ttft_ms=None if self.first_token_at is None else
            (self.first_token_at - self.started) * 1000,
            status=status, http_status=self.status, stream=self.stream,
            trace_id=current_trace_id()))

    def tokens(self) -> tuple[int, int]:
        """Engine-reported usage; estimates when the engine reported none."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens, self.completion_tokens or 0
        if self.status >= 400 and self.first_token_at is None:
            return 0, 0
        return self.prompt_estimate, max(0, self.chunks - 1) if self.stream else 0

    def cost(self, prompt: int, completion: int) -> float:
        mv = self.model_view
        if mv is None:
            return 0.0
        return prompt / 1000 * (mv.price_in_per_1k or 0.0) + \
            completion / 1000 * (mv.price_out_per_1k or 0.0)

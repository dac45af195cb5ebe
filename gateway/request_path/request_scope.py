"""Everything one request holds, released in one place whatever fails.

A `RequestScope` is made once the request passed its limits; from then on each resource it
takes is pushed on its exit list as it is taken, and `close(status)` (once, at the end
of the answer: the handler for a JSON answer, the relay for a stream) lets go of all of them
in reverse order:

    scope = RequestScope(services, principal, endpoint, parsed, started, prompt_tokens)
    scope.hold_limits(decision, hold)          # the budget hold and TPM reservation: settled
    await scope.admit(pool, tenant, priority, cost)   # the admission ticket: released
    scope.hold_backends()     # breaker permit, in-flight count, upstream span, engine stream
    scope.bind(model_view, backend)            # ... moved on retry with unbind()/bind()
    await scope.close(200)                     # or 5xx / 499: metrics, usage row, all released

Pushing the accounting callback first means it runs last, once every resource is free.
The exit list is what contextlib's AsyncExitStack does, without its per-callback wrappers
(a few percent of the gateway's CPU per request): every exit runs even when one before it
raises, and the first error is raised once all have run.
"""
from __future__ import annotations

import time

from gateway.request_path.accounting import account


class RequestScope:
    __slots__ = ("services", "principal", "endpoint", "parsed", "requested", "stream",
                 "started", "prompt_estimate", "model_view", "backend", "version",
                 "first_token_at", "last_chunk_at", "chunks", "_itl", "prompt_tokens",
                 "completion_tokens", "status", "permit", "ticket", "upstream", "text_parts",
                 "last_backend", "engine_stream", "_exits", "_closed", "_backends_held")

    def __init__(self, services, principal, endpoint, parsed, started: float,
                 prompt_estimate: int):
        self.services = services
        self.principal = principal
        self.endpoint = endpoint
        self.parsed = parsed
        self.requested: str = parsed.model
        self.stream: bool = parsed.stream
        self.started = started
        self.prompt_estimate = prompt_estimate
        self.model_view = None
        self.backend = None
        self.last_backend = None   # the backend serving at close (the usage row names it)
        self.version = "none"
        self.first_token_at: float | None = None
        self.last_chunk_at: float | None = None
        self.chunks = 0
        self._itl = None       # the ITL histogram of this model, looked up once per stream
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.status = 200
        self.permit = None     # breaker permit of the current backend
        self.ticket = None     # admission ticket
        self.upstream = None   # UpstreamTrace of the current engine call
        self.engine_stream = None  # the EngineStream being relayed (aborted at close)
        self.text_parts: list[str] | None = None  # the answer, kept only when compared
        self._closed = False
        self._backends_held = False
        self._exits: list[tuple] = [(account, (self,), False)]   # (call, args, awaited), reversed

    # -- resources -----------------------------------------------------------
    def hold_limits(self, gate, decision, hold) -> None:
        """The rate-limit reservation and budget hold, settled with the real usage at close."""
        self._exits.append((self._settle_limits, (gate, decision, hold), False))

    def _settle_limits(self, gate, decision, hold) -> None:
        prompt, completion = self.tokens()
        gate.settle(decision, hold, prompt + completion, self.cost(prompt, completion))

    async def admit(self, pool, tenant: str, priority: str, cost: int) -> None:
        """Wait for an admission slot (QueueFull / QueueTimeout propagate); released at close."""
        admission = pool.admit(tenant=tenant, priority=priority, cost=cost)
        self.ticket = await admission.__aenter__()
        self._exits.append((admission.__aexit__, (None, None, None), True))

    def on_close(self, callback, *args) -> None:
        """Run `callback(*args)` at close, before the admission slot and limits are let go."""
        self._exits.append((callback, args, False))

    def hold_backends(self) -> None:
        """From now on the scope may hold a backend (permit, in-flight count, trace span)."""
        if not self._backends_held:
            self._backends_held = True
            self._exits.append((self._release_backend, (), False))
            self._exits.append((self._abort_stream, (), True))

    def bind(self, model_view, backend, permit) -> None:
        """The request now runs on `backend`: count it in flight there."""
        self.model_view = model_view
        self.backend = backend
        self.version = backend.version or "none"
        self.permit = permit
        s = self.services
        s.router.book.acquire(backend.id)
        if self.ticket is not None:
            self.ticket.bind(backend.id)
        s.metrics.inflight_of(model_view.name, backend.id).inc()

    def unbind(self) -> None:
        if self.backend is not None:
            s = self.services
            s.router.book.release(self.backend.id)
            s.metrics.inflight_of(self.model_view.name, self.backend.id).dec()
            self.backend = None

    def _release_backend(self) -> None:
        if self.permit is not None:   # no outcome (client gone): frees a half-open probe slot
            self.permit.close()
            self.permit = None
        self.unbind()
        if self.upstream is not None:
            self.upstream.end(self.status, self.chunks if self.stream else None)

    async def _abort_stream(self) -> None:
        stream, self.engine_stream = self.engine_stream, None
        if stream is not None:
            await stream.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, status: int | None = None) -> None:
        """Account the request and release everything it holds (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if status is not None:
            self.status = status
        self.last_backend = self.backend
        exits, error = self._exits, None
        while exits:
            call, args, awaited = exits.pop()
            try:
                if awaited:
                    await call(*args)
                else:
                    call(*args)
            except BaseException as exc:   # the rest is released all the same
                error = error or exc
        if error is not None:
            raise error

    # -- streaming timings ---------------------------------------------------
    def first_token(self) -> None:
        self.first_token_at = self.last_chunk_at = time.perf_counter()
        self.chunks = 1

    def chunk(self) -> None:
        now = time.perf_counter()
        if self.last_chunk_at is not None:
            if self._itl is None:
                self._itl = self.services.metrics.itl.labels(self.requested)
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
        self.services.metrics.upstream_errors.labels(self.requested, backend.id, kind).inc()
        self._report(ok=kind == "http_4xx")   # a 4xx means the engine is healthy

    def upstream_ok(self) -> None:
        self._report(ok=True)

    def _report(self, ok: bool) -> None:
        if self.permit is not None:
            self.permit.success() if ok else self.permit.failure()
            self.permit.close()
            self.permit = None

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

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
The exits live in an `ExitLedger` (exit_ledger.py); what the answer measured on its way out
(chunk timings, engine usage, the text a shadow compares) in `scope.stats`, a `StreamStats`
(stream_stats.py).
"""
from __future__ import annotations

from common.metric_names import NO_VERSION
from gateway.request_path.accounting import account
from gateway.request_path.exit_ledger import ExitLedger
from gateway.request_path.stream_stats import StreamStats


class RequestScope:
    __slots__ = ("services", "principal", "endpoint", "parsed", "requested", "stream",
                 "started", "prompt_estimate", "model_view", "backend", "version", "stats",
                 "status", "permit", "ticket", "upstream", "last_backend", "engine_stream",
                 "guard", "cache", "cache_price", "_exits", "_closed", "_backends_held")

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
        self.version = NO_VERSION
        self.stats = StreamStats(lambda: services.metrics.itl.labels(self.requested))
        self.status = 200
        self.permit = None     # breaker permit of the current backend
        self.ticket = None     # admission ticket
        self.upstream = None   # UpstreamTrace of the current engine call
        self.engine_stream = None  # the EngineStream being relayed (aborted at close)
        self.guard = None      # gateway.guardrails RequestGuard: None when no policy applies
        self.cache = None      # hit | miss (gateway/cache); None: the cache was not asked
        self.cache_price = None    # USD per 1k tokens of a cache hit (the model's cache policy)
        self._closed = False
        self._backends_held = False
        self._exits = ExitLedger()
        self._exits.push(account, self)

    # -- resources -----------------------------------------------------------
    def hold_limits(self, gate, decision, hold) -> None:
        """The rate-limit reservation and budget hold, settled with the real usage at close."""
        self._exits.push(self._settle_limits, gate, decision, hold)

    def _settle_limits(self, gate, decision, hold) -> None:
        prompt, completion = self.tokens()
        gate.settle(decision, hold, prompt + completion, self.cost(prompt, completion))

    async def admit(self, pool, tenant: str, priority: str, cost: int) -> None:
        """Wait for an admission slot (QueueFull / QueueTimeout propagate); released at close."""
        self.ticket = await pool.acquire(tenant, priority, cost)
        self._exits.push(pool.release, self.ticket)

    def on_close(self, callback, *args) -> None:
        """Run `callback(*args)` at close, before the admission slot and limits are let go."""
        self._exits.push(callback, *args)

    def hold_backends(self) -> None:
        """From now on the scope may hold a backend (permit, in-flight count, trace span)."""
        if not self._backends_held:
            self._backends_held = True
            self._exits.push(self._release_backend)
            self._exits.push_awaited(self._abort_stream)

    def bind(self, model_view, backend, permit) -> None:
        """The request now runs on `backend`: count it in flight there."""
        self.model_view = model_view
        self.backend = backend
        self.version = backend.version or NO_VERSION
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
            self.upstream.end(self.status, self.stats.chunks if self.stream else None)

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
        await self._exits.close()

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
        return self.stats.tokens(self.prompt_estimate, self.status >= 400, self.stream)

    def cost(self, prompt: int, completion: int) -> float:
        if self.cache_price is not None:   # answered by the response cache
            return (prompt + completion) / 1000 * self.cache_price
        mv = self.model_view
        if mv is None:
            return 0.0
        return prompt / 1000 * (mv.price_in_per_1k or 0.0) + \
            completion / 1000 * (mv.price_out_per_1k or 0.0)

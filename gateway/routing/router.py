"""Filters → strategy → pick, for one model's backends.

    backend = router.pick(model_view, backends, ctx)
    if backend is None:
        raise NoBackend(f"no ready backend for model '{requested}'")   # 503 no_ready_backend
"""
from __future__ import annotations

from common.error_codes import ErrorCode
from common.errors import InferplaneError
from common.vocabulary import BackendState, RoutingStrategy
from gateway.routing.load_book import LoadBook
from gateway.routing.prefix_index import PrefixIndex
from gateway.routing.resident import ResidentBlocks
from gateway.routing.strategies import (LeastLoaded, LoraAffinity, PowerOfTwo, PrefixAware,
                                        RoundRobin, RouteContext, SessionAffinity, Weighted)
from gateway.settings import RoutingSettings

ROUTABLE_STATES = frozenset({BackendState.READY})


class NoBackend(InferplaneError):
    """No backend of the model may take the request (none ready, breakers open, all full)."""

    status, code = 503, ErrorCode.NO_READY_BACKEND


class Router:
    def __init__(self, settings: RoutingSettings, metrics, breaker=None):
        self.settings = settings
        self.metrics = metrics
        self.breaker = breaker
        self.book = LoadBook()
        self.prefix_index = PrefixIndex(settings.prefix_index_blocks)
        self.resident = ResidentBlocks()
        slack = settings.prefix_load_slack
        pickers = (RoundRobin(), LeastLoaded(self.book), PowerOfTwo(self.book), Weighted(),
                   PrefixAware(self.book, self.prefix_index, settings.prefix_block_chars,
                               slack, self.resident),
                   LoraAffinity(self.book), SessionAffinity(self.book))
        self.strategies: dict[RoutingStrategy, object] = {p.kind: p for p in pickers}

    def strategy_name(self, model_view) -> str:
        name = self.settings.strategy_for(model_view.name, getattr(model_view, "routing", None))
        return name if name in self.strategies else self.settings.strategy

    def candidates(self, backends, exclude: set[str] | frozenset = frozenset(),
                   has_room=None) -> list:
        """Backends that may take a request now: ready, breaker closed, under their in-flight
        cap, not already tried."""
        out = []
        for b in backends:
            if b.state not in ROUTABLE_STATES or b.id in exclude:
                continue
            if has_room is not None and not has_room(b.id):
                continue
            if self.breaker is not None and not self.breaker.get(b.id).is_available():
                continue
            out.append(b)
        return out

    def holding(self, candidates: list, adapter: str) -> list:
        """The candidates with `adapter` loaded (the registry's rows or the engine's own report).
        Engines load adapters only when told to, so a LoRA request sent to any other engine
        would get a 404 whatever the strategy or the load: when one holds it, only those
        compete (the admission queue, not a spill to an engine without it, absorbs a burst)."""
        return [b for b in candidates
                if adapter in (b.adapters or ()) or adapter in self.book.engine_view(b.id).adapters]

    def pick(self, model_view, backends, ctx: RouteContext,
             exclude: set[str] | frozenset = frozenset(), has_room=None):
        """The chosen BackendView among `backends` (of `model_view`), None when none is routable."""
        candidates = self.candidates(backends, exclude, has_room)
        if ctx.adapter:
            candidates = self.holding(candidates, ctx.adapter) or candidates
        if not candidates:
            return None
        strategy = self.strategy_name(model_view)
        backend = self.strategies[strategy].pick(candidates, ctx)
        self.metrics.routing_decision_of(model_view.name, strategy, backend.id).inc()
        if ctx.prefix_blocks:
            self._record_prefix(model_view.name, backend.id, ctx)
        return backend

    def _record_prefix(self, model: str, backend_id: str, ctx: RouteContext) -> None:
        # Character blocks count ~4 characters per token, to line up with engine counters.
        per_block = ctx.block_tokens or self.settings.prefix_block_chars / 4
        self.metrics.prefix_lookup_tokens.labels(model).inc(ctx.prefix_blocks * per_block)
        self.metrics.prefix_hit_tokens.labels(model).inc(ctx.prefix_matched * per_block)
        self.metrics.prefix_hit_estimate.labels(model, backend_id).set(
            ctx.prefix_matched / ctx.prefix_blocks)

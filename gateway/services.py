"""Everything one gateway process holds between requests (hung on app.state.gateway).

    services = build_services(settings, snapshot_source, cold_starter=starter)
    app.state.gateway = services           # read by routes: request.app.state.gateway
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable, Protocol

from common.auth.jwt_verifier import JWTVerifier
from common.tracing import httpx_trace_hook
from common.usage_record import UsageRecord
from common.vocabulary import BackendState
from engine_adapter import EngineAdapter, create_adapter
from engine_adapter.openai_http import Timeouts, create_http_client
from gateway.cache.response_cache import ResponseCache
from gateway.limits.gate import LimitsGate
from gateway.observability.metrics import GatewayMetrics
from gateway.routing import Router
from gateway.routing.kv_events import KvEventIndex
from gateway.routing.kv_events_subscriber import KvEventSubscribers
from gateway.settings import GatewaySettings
from gateway.traffic.admission import AdmissionController
from gateway.traffic.breaker import BreakerConfig, BreakerRegistry
from gateway.traffic.coldstart import ColdStarter
from gateway.traffic.splits import ShadowMirror

log = logging.getLogger("inferplane.gateway")


class SnapshotSource(Protocol):
    """Where the current routing snapshot is read (the control plane republishes it)."""
    current: object


class AdapterPool:
    """One adapter per backend, all sharing a pooled HTTP client."""

    def __init__(self, settings: GatewaySettings):
        t = settings.timeouts
        self.timeouts = Timeouts(connect=t.connect, first_token=t.first_token, total=t.total)
        self.client = create_http_client(max_connections=settings.max_connections,
                                         keepalive=settings.max_connections,
                                         connect_timeout=t.connect,
                                         event_hooks={"request": [httpx_trace_hook]})
        self._adapters: dict[tuple[str, str, str], EngineAdapter] = {}

    def get(self, backend) -> EngineAdapter:
        key = (backend.id, backend.url, backend.engine)
        adapter = self._adapters.get(key)
        if adapter is None:
            adapter = create_adapter(backend.url, backend.engine, client=self.client,
                                     timeouts=self.timeouts, managed=backend.managed)
            self._adapters[key] = adapter
        return adapter

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            await adapter.aclose()
        await self.client.aclose()


@dataclass(frozen=True, slots=True)
class GatewayServices:
    """The services every request uses, built once per process (`build_services`), typed,
    and never re-bound (the lists are appended to at start-up: usage sinks, background tasks)."""
    settings: GatewaySettings
    snapshot_source: SnapshotSource
    metrics: GatewayMetrics
    breaker: BreakerRegistry
    admission: AdmissionController
    router: Router
    adapters: AdapterPool
    limits: LimitsGate
    shadow: ShadowMirror
    kv_events: KvEventSubscribers       # vLLM KV event subscriptions (load poller)
    cache: ResponseCache                # response cache (gateway/cache); models opt in
    jwt: JWTVerifier | None = None
    cold_starter: ColdStarter | None = None   # set by the control plane (`inferplane up`)
    usage_sinks: list[Callable[[UsageRecord], None]] = field(default_factory=list)
    tasks: list[asyncio.Task] = field(default_factory=list)

    def admission_pool(self, model_view):
        """The model's admission pool, its per-backend caps following the snapshot."""
        pool = self.admission.pool(model_view.name)
        version = self.snapshot.version
        if getattr(pool, "snapshot_version", None) != version:
            cap = self.settings.admission.max_inflight_per_backend
            pool.set_backends({b.id: cap for b in model_view.backends
                               if b.state == BackendState.READY})
            pool.snapshot_version = version
        return pool

    @property
    def snapshot(self):
        return self.snapshot_source.current

    def emit_usage(self, record: UsageRecord) -> None:
        for sink in self.usage_sinks:
            try:
                sink(record)
            except Exception:  # a broken sink must not fail the request that already finished
                log.exception("usage sink failed")


def build_services(settings: GatewaySettings, snapshot_source: SnapshotSource, *,
                   cold_starter: ColdStarter | None = None,
                   metrics: GatewayMetrics | None = None) -> GatewayServices:
    """Every service of one gateway process, wired to its metrics."""
    m = metrics or GatewayMetrics()
    b, a, sh = settings.breaker, settings.admission, settings.shadow
    breaker = BreakerRegistry(
        BreakerConfig(consecutive_failures=b.failure_threshold, open_duration_s=b.open_seconds),
        on_state_change=lambda backend, _old, new: m.set_breaker(backend, new))
    admission = AdmissionController(
        max_queue=a.queue_size, queue_timeout_s=a.queue_timeout_s,
        on_depth=lambda model, _depth: _queue_depth(m, admission, model),
        on_wait=lambda model, prio, wait: m.queue_wait_of(model, prio).observe(wait),
        on_reject=lambda model, reason: m.rejections.labels(model, reason).inc())
    router = Router(settings.routing, m, breaker)
    return GatewayServices(
        settings=settings, snapshot_source=snapshot_source, metrics=m, breaker=breaker,
        admission=admission, router=router, adapters=AdapterPool(settings),
        limits=LimitsGate(settings, m),
        shadow=ShadowMirror(max_concurrency=sh.max_concurrent, timeout_s=sh.timeout_s,
                            on_record=m.shadow_record),
        kv_events=KvEventSubscribers(settings.routing.kv_events, KvEventIndex(router.resident)),
        cache=ResponseCache(settings, m),
        jwt=JWTVerifier(settings.jwt) if settings.jwt.enabled else None,
        cold_starter=cold_starter)


def _queue_depth(m: GatewayMetrics, admission: AdmissionController, model: str) -> None:
    for priority, depth in admission.pool(model).depth_by_priority().items():
        m.queue_depth.labels(model, priority).set(depth)

"""inferplane_backend_healthy{model, backend}: the registry's view of every backend, exported
by the process that runs the health prober (the control plane; `inferplane up` serves it on
the gateway's /metrics). 1 = ready, 0 = starting, down or draining.

    gauge = BackendHealthGauge(registry)
    gauge.publish(gauge.read(sessions))     # after every probe round (sync: call in a thread)

A cold-tier backend is stopped on purpose (scaled to zero): it has no series, so a model at
rest does not page as "no healthy backend". Series of deleted backends are removed.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from common.metric_names import Metric
from common.vocabulary import BackendState, Tier
from registry.orm.catalog import Backend, Model


@dataclass(frozen=True)
class BackendHealth:
    model: str
    backend: str      # the backend's id, as the gateway's backend labels spell it
    healthy: bool


class BackendHealthGauge:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(Metric.BACKEND_HEALTHY,
                           "1 when the backend is ready (health probe or engine supervisor)",
                           ["model", "backend"], registry=registry)
        self._published: set[tuple[str, str]] = set()

    @staticmethod
    def read(sessions: sessionmaker) -> list[BackendHealth]:
        with sessions() as session:
            rows = session.execute(select(Model.name, Backend.id, Backend.state)
                                   .join(Model, Model.id == Backend.model_id)
                                   .where(Backend.tier != Tier.COLD)).all()
        return [BackendHealth(name, str(backend_id), state == BackendState.READY)
                for name, backend_id, state in rows]

    def publish(self, rows: list[BackendHealth]) -> None:
        current = set()
        for row in rows:
            self.gauge.labels(row.model, row.backend).set(1 if row.healthy else 0)
            current.add((row.model, row.backend))
        for gone in self._published - current:
            self.gauge.remove(*gone)
        self._published = current

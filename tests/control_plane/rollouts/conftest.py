"""A migrated SQLite registry with model 'chat' (v1 behind alias 'default', v2 registered,
a ready backend for each), the gateway's real metrics in a registry the test fills, and a
clock the test moves."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from control_plane.rollouts.controller import RolloutController
from control_plane.rollouts.metrics_source import RegistryMetricsSource
from control_plane.slo import SloTracker
from gateway.observability.metrics import GatewayMetrics
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from tests.registry.databases import sqlite_url  # noqa: F401

MODEL = "chat"


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Traffic:
    """Requests as the gateway records them, per version."""

    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)

    def send(self, version: str, n: int, *, code: str = "200", latency_s: float = 0.1,
             ttft_s: float | None = None, model: str = MODEL) -> None:
        for _ in range(n):
            self.metrics.requests.labels(model, version, code).inc()
            self.metrics.request_duration.labels(model, version).observe(latency_s)
            if ttft_s is not None:
                self.metrics.ttft.labels(model, version).observe(ttft_s)


def seed(sessions) -> None:
    with sessions.begin() as s:
        model = q.create_model(s, MODEL)
        for label in ("v1", "v2"):
            q.add_version(s, model, label)
            q.add_backend(s, MODEL, f"http://127.0.0.1:1/{label}/v1", version=label,
                          served_model=MODEL, state="ready")
        q.set_alias(s, model, "default", "v1", "test")
        q.bump_snapshot_version(s)


@pytest.fixture
def sessions(sqlite_url):
    upgrade(sqlite_url, progress=None)
    factory = make_session_factory(sqlite_url)
    seed(factory)
    yield factory
    factory.kw["bind"].dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def traffic() -> Traffic:
    return Traffic()


@pytest.fixture
def exported() -> CollectorRegistry:
    """Where the control plane's own gauges go."""
    return CollectorRegistry()


@pytest.fixture
def slo(sessions, clock, exported) -> SloTracker:
    return SloTracker(sessions, registry=exported, clock=clock)


@pytest.fixture
def controller(sessions, traffic, clock, slo, exported) -> RolloutController:
    changes: list[int] = []
    ctl = RolloutController(sessions, RegistryMetricsSource(traffic.metrics.registry),
                            lambda: changes.append(1), slo=slo, registry=exported, clock=clock)
    ctl.changes = changes  # type: ignore[attr-defined]
    return ctl

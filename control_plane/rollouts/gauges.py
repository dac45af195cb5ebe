"""Prometheus gauges for rollouts, registered into the registry the caller serves."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from common.metric_names import Metric
from control_plane.rollouts.spec import PHASE_NUMBER
from control_plane.rollouts.transitions import phase_of, status_of
from registry.orm.rollouts import Rollout


class RolloutGauges:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.state = Gauge(
            Metric.ROLLOUT_STATE,
            "Rollout phase: 0 pending, 1 progressing, 2 paused, 3 promoting, 4 succeeded, "
            "5 aborting, 6 rolled_back", ["model", "rollout"], registry=registry)
        self.step_started = Gauge(
            Metric.ROLLOUT_STEP_STARTED,
            "Unix time the rollout's current step began", ["model", "rollout"],
            registry=registry)

    def update(self, model: str, rollout: Rollout) -> None:
        labels = (model, str(rollout.id))
        self.state.labels(*labels).set(PHASE_NUMBER[phase_of(rollout)])
        started = status_of(rollout).get("step_started_at")
        if started is not None:
            self.step_started.labels(*labels).set(started)


__all__ = ["RolloutGauges"]

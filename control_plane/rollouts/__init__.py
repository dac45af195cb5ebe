"""Progressive delivery: canary, blue/green and shadow rollouts of a model version, gated
by analysis of the gateway's per-version metrics and by the model's error budgets."""

from control_plane.rollouts.analysis import Measurement, measure
from control_plane.rollouts.api import build_rollouts_router, include_rollout_routes
from control_plane.rollouts.controller import RolloutController
from control_plane.rollouts.metrics_source import MetricsSource, MetricsUnavailable, RegistryMetricsSource, Scrape
from control_plane.rollouts.spec import PHASES, RolloutCreate

__all__ = ["Measurement", "MetricsSource", "MetricsUnavailable", "PHASES",
           "RegistryMetricsSource", "RolloutController", "RolloutCreate", "Scrape",
           "build_rollouts_router", "include_rollout_routes", "measure"]

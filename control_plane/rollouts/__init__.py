"""Progressive delivery: canary, blue/green and shadow rollouts of a model version, gated
by analysis of the gateway's per-version metrics and by the model's error budgets."""

from .analysis import Measurement, measure
from .api import build_rollouts_router, include_rollout_routes
from .controller import RolloutController
from .metrics_source import MetricsSource, MetricsUnavailable, RegistryMetricsSource, Scrape
from .spec import PHASES, RolloutCreate

__all__ = ["Measurement", "MetricsSource", "MetricsUnavailable", "PHASES",
           "RegistryMetricsSource", "RolloutController", "RolloutCreate", "Scrape",
           "build_rollouts_router", "include_rollout_routes", "measure"]

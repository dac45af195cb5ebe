"""Tier manager settings and the engine templates it starts cold models from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineTemplate:
    """How to start one builtin engine for a model (`python -m builtin_engine serve ...`)."""

    model: str  # builtin engine model reference: known name, .gguf path or HF directory
    args: dict[str, Any] = field(default_factory=dict)  # extra CLI flags
    replicas: int = 1  # hot/warm: engines kept running; cold: engines started on demand


@dataclass
class TierConfig:
    # Engines the manager may run at once (hot + warm + started cold engines).
    max_engines: int = 4
    # A cold engine with no request for this long is stopped (scale to zero).
    idle_s: float = 300.0
    # Longest a cold start may take before the waiting requests give up.
    start_timeout_s: float = 600.0
    # Promotion/demotion between warm and cold: requests per second over `rate_window_s`.
    # Two thresholds (promote above the first, demote below the second) plus a minimum
    # dwell time in a tier, so a rate hovering near one threshold does not flap.
    promote_rps: float = 1.0
    demote_rps: float = 0.2
    rate_window_s: float = 60.0
    min_dwell_s: float = 300.0
    # Warm tier: LoRA slots per engine and the shortest residency before an adapter can be
    # evicted (loading costs seconds; evicting a just-loaded adapter would thrash).
    max_loras: int = 4
    min_residency_s: float = 30.0
    tick_s: float = 1.0
    host: str = "127.0.0.1"
    port_base: int = 8200
    engines: dict[str, EngineTemplate] = field(default_factory=dict)  # model name → template

    def __post_init__(self) -> None:
        if self.demote_rps >= self.promote_rps:
            raise ValueError(f"demote_rps ({self.demote_rps}) must be below promote_rps "
                             f"({self.promote_rps}) for hysteresis")
        if self.max_engines < 1:
            raise ValueError("max_engines must be at least 1")
        if self.idle_s <= 0 or self.rate_window_s <= 0:
            raise ValueError("idle_s and rate_window_s must be positive")


def tier_config_from_settings(settings, **overrides: Any) -> TierConfig:
    """Templates for every configured builtin model without fixed backends; `overrides`
    set TierConfig fields (e.g. from a `tiers:` settings section)."""
    engines = {
        spec.name: EngineTemplate(model=spec.model or spec.name, args=dict(spec.engine_args),
                                  replicas=max(spec.replicas, 1))
        for spec in settings.models if spec.engine == "builtin" and not spec.backends}
    overrides.setdefault("port_base", settings.engine_port_base + 100)
    overrides.setdefault("start_timeout_s", settings.engine_ready_timeout_s)
    return TierConfig(engines=engines, **overrides)

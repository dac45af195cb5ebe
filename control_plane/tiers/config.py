"""Tier manager settings and the engine templates it starts cold models from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from control_plane.settings import TierSettings
from registry.vocabulary import EngineKind


@dataclass(frozen=True)
class EngineTemplate:
    """How to start one builtin engine for a model (`python -m builtin_engine serve ...`)."""

    model: str  # builtin engine model reference: known name, .gguf path or HF directory
    args: dict[str, Any] = field(default_factory=dict)  # extra CLI flags
    replicas: int = 1  # hot/warm: engines kept running; cold: engines started on demand


class TierConfig(TierSettings):
    """What the tier manager runs on: the section's tunables plus the engine templates."""

    engines: dict[str, EngineTemplate] = Field(default_factory=dict)  # model name → template


def tier_config_from_settings(settings, **overrides: Any) -> TierConfig:
    """The loaded `settings.tiers` section plus templates for every configured builtin model
    without fixed backends; `overrides` set TierConfig fields on top::

        config = tier_config_from_settings(load_settings("inferplane.yaml"))
    """
    engines = {
        spec.name: EngineTemplate(model=spec.model or spec.name, args=dict(spec.engine_args),
                                  replicas=max(spec.replicas, 1))
        for spec in settings.models if spec.engine == EngineKind.BUILTIN and not spec.backends}
    fields = {"port_base": settings.engine_port_base + 100,
              "start_timeout_s": settings.engine_ready_timeout_s,
              **settings.tiers.model_dump(exclude_unset=True), **overrides}
    return TierConfig(engines=engines, **fields)

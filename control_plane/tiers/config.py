"""Tier manager settings and the engine templates it starts cold models from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from common.vocabulary import EngineKind
from control_plane.settings import VLLM_EXECUTABLE, ModelSpec, TierSettings
from control_plane.supervisor import MANAGED_ENGINES, EngineSpec


@dataclass(frozen=True)
class EngineTemplate:
    """How to start one engine for a model: the builtin engine (`python -m builtin_engine
    serve ...`) or vLLM (`<executable> serve <model> ...`)::

        EngineTemplate("/models/m-hf", args={"max_loras": 1}, engine="vllm",
                       executable="/opt/vllm/bin/vllm", env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    """

    model: str  # builtin: known name, .gguf path or HF directory; vllm: HF directory or repo id
    args: dict[str, Any] = field(default_factory=dict)  # extra CLI flags
    replicas: int = 1  # hot/warm: engines kept running; cold: engines started on demand
    engine: str = EngineKind.BUILTIN  # one of supervisor.MANAGED_ENGINES
    executable: str | None = None  # vllm: its CLI (default `vllm` on PATH)
    env: dict[str, str] = field(default_factory=dict)  # added to the engine's environment

    def __post_init__(self) -> None:
        if self.engine not in MANAGED_ENGINES:  # refused with the settings, not at a cold start
            raise ValueError(f"engine kind {self.engine!r} cannot be started; "
                             f"startable: {', '.join(MANAGED_ENGINES)}")

    @classmethod
    def of(cls, spec: ModelSpec) -> "EngineTemplate":
        """The template of a configured model (one with a startable engine, no backends)."""
        return cls(model=spec.model or spec.name, args=dict(spec.engine_args),
                   replicas=max(spec.replicas, 1), engine=spec.engine,
                   executable=spec.executable, env=dict(spec.engine_env))

    def spec(self, name: str, port: int, host: str = "127.0.0.1") -> EngineSpec:
        """The process to launch for model `name` on `port`."""
        return EngineSpec(name=name, model=self.model, port=port, host=host,
                          args=dict(self.args), engine=self.engine, executable=self.executable,
                          env=dict(self.env))


def startable(spec: ModelSpec) -> bool:
    """The control plane starts this model's engines (it names no fixed backends)."""
    return spec.engine in MANAGED_ENGINES and not spec.backends


class TierConfig(TierSettings):
    """What the tier manager runs on: the section's tunables plus the engine templates."""

    engines: dict[str, EngineTemplate] = Field(default_factory=dict)  # model name → template

    @model_validator(mode="after")
    def _allowed_executables(self) -> "TierConfig":
        """Every template starts this interpreter or an executable of `executables`."""
        for name, template in self.engines.items():
            executable = template.executable or VLLM_EXECUTABLE
            if template.engine == EngineKind.VLLM and executable not in self.executables:
                raise ValueError(f"engine template of {name!r}: {executable!r} is not in "
                                 f"tiers.executables {self.executables}")
        return self


def tier_config_from_settings(settings, **overrides: Any) -> TierConfig:
    """The loaded `settings.tiers` section plus templates for every configured model with a
    startable engine (builtin or vllm) and no fixed backends; `overrides` set TierConfig
    fields on top::

        config = tier_config_from_settings(load_settings("inferplane.yaml"))
    """
    engines = {spec.name: EngineTemplate.of(spec) for spec in settings.models if startable(spec)}
    fields = {"port_base": settings.engine_port_base + 100,
              "start_timeout_s": settings.engine_ready_timeout_s,
              **settings.tiers.model_dump(exclude_unset=True), **overrides}
    return TierConfig(engines=engines, **fields)

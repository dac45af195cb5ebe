"""Inferplane settings: one YAML file with ${VAR} / ${VAR:-default} interpolation.

With no file, the embedded default applies: SQLite under .inferplane/, in-memory limits, and the
built-in engine serving smollm2-135m-instruct (chat) and all-minilm-l6-v2 (embeddings).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.modalities import Modality

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"  # served beside it: /v1/embeddings


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    engine: str = "openai"
    served_model: str | None = None
    gpu: str | None = None
    weight: float = Field(1.0, gt=0)
    version: str | None = None


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    engine: str = "builtin"
    model: str | None = None  # builtin engine model reference (name, .gguf path or HF dir)
    tier: Literal["hot", "warm", "cold"] = "hot"
    replicas: int = Field(1, ge=0)
    context_length: int | None = None
    routing: str | None = None
    fallbacks: list[str] = Field(default_factory=list)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    backends: list[BackendSpec] = Field(default_factory=list)
    price_in_per_1k: float = 0.0
    price_out_per_1k: float = 0.0
    # content types it reads: text, image, audio, file, video (others are refused with a 400)
    modalities: list[Modality] = Field(default_factory=lambda: ["text"], min_length=1)

    @model_validator(mode="after")
    def _builtin_needs_model(self) -> "ModelSpec":
        if self.engine == "builtin" and not self.backends and not self.model:
            self.model = self.name
        return self


class MlflowSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tracking_uri: str
    prefix: str = ""
    interval_s: float = Field(60.0, gt=0)
    direction: Literal["pull", "push", "both"] = "both"


class ServerSettings(BaseModel):
    """Connection hygiene of the HTTP server (builtin_engine.connections.ConnectionLimits)."""
    model_config = ConfigDict(extra="forbid")
    keep_alive_s: float = Field(5.0, gt=0)
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    max_connections: int = Field(4096, ge=1)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)

    def limits(self):
        from builtin_engine.connections import ConnectionLimits

        return ConnectionLimits(**self.model_dump())


class BackendSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # CIDRs and host names backends may live at; empty: anywhere but link-local and metadata
    allowed_networks: list[str] = Field(default_factory=list)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data_dir: str = ".inferplane"
    database_url: str | None = None  # None = sqlite:///<data_dir>/inferplane.db
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    engine_port_base: int = 8100
    engine_ready_timeout_s: float = 600.0
    models: list[ModelSpec] = Field(default_factory=lambda: [
        ModelSpec(name=DEFAULT_MODEL), ModelSpec(name=DEFAULT_EMBEDDING_MODEL)])
    routing: dict[str, Any] = Field(default_factory=dict)
    gateway: dict[str, Any] = Field(default_factory=dict)  # passed to GatewaySettings
    mlflow: MlflowSettings | None = None  # optional Model Registry sync
    tiers: dict[str, Any] = Field(default_factory=dict)  # TierConfig fields (idle_s, max_engines...)
    gateway_metrics_urls: list[str] = Field(default_factory=list)  # rollout analysis (split mode)
    rollout_tick_s: float = Field(5.0, gt=0, le=300)  # how often rollouts are advanced
    health_interval_s: float = Field(2.0, gt=0, le=300)  # probe rounds of unmanaged backends
    log_level: str = "info"
    server: ServerSettings = Field(default_factory=ServerSettings)
    backends: BackendSettings = Field(default_factory=BackendSettings)
    # derives each builtin engine's API key; None: <data_dir>/engine.secret (made on first start)
    engine_secret: str | None = None

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'inferplane.db'}"

    def gateway_settings_dict(self) -> dict[str, Any]:
        merged = dict(self.gateway)
        merged.setdefault("redis_url", self.redis_url)
        if self.routing:
            merged.setdefault("routing", self.routing)
        return merged


def interpolate_env(text: str) -> str:
    def replace(match: re.Match) -> str:
        value = os.environ.get(match.group(1))
        if value is None:
            if match.group(2) is None:
                raise ValueError(f"environment variable {match.group(1)} is not set")
            return match.group(2)
        return value
    return _ENV_PATTERN.sub(replace, text)


def load_settings(path: str | os.PathLike | None = None) -> Settings:
    if path is None:
        return Settings()
    raw = yaml.safe_load(interpolate_env(Path(path).read_text())) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be a mapping")
    return Settings.model_validate(raw)

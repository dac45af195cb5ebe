"""Inferplane settings: one YAML file with ${VAR} / ${VAR:-default} interpolation.

With no file, the embedded default applies: SQLite under .inferplane/, in-memory limits, and the
built-in engine serving smollm2-135m-instruct (chat) and all-minilm-l6-v2 (embeddings).

Every section is a pydantic model that refuses unknown keys, validated once when the file
loads; a bad file is refused there with each offending key's full path::

    settings = load_settings("inferplane.yaml")
    # SettingsError: inferplane.yaml: gateway.routing.strategyy: unknown key
    settings.gateway            # GatewaySettings, with the top-level routing/redis_url applied
    settings.tiers              # TierSettings
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.guardrail_spec import GuardrailSettings
from common.vocabulary import EngineKind, Modality, ModelTask, RoutingStrategy, Tier
from gateway.settings import GatewaySettings, RoutingSettings
from registry.cache_policy import CachePolicy

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"  # served beside it: /v1/embeddings
VLLM_EXECUTABLE = "vllm"   # what a vLLM engine is started with unless `executable` names one


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    engine: str = EngineKind.OPENAI   # open: any OpenAI-compatible server
    served_model: str | None = None
    gpu: str | None = None
    weight: float = Field(1.0, gt=0)
    version: str | None = None


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    engine: str = EngineKind.BUILTIN
    model: str | None = None  # builtin engine model reference (name, .gguf path or HF dir)
    tier: Tier = Tier.HOT
    replicas: int = Field(1, ge=0)
    context_length: int | None = None
    routing: RoutingStrategy | None = None
    fallbacks: list[str] = Field(default_factory=list)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    # engine: vllm without backends: the control plane runs `<executable> serve <model>`
    # (default `vllm` on PATH) with engine_args as flags and engine_env added to its environment
    executable: str | None = Field(None, min_length=1)
    engine_env: dict[str, str] = Field(default_factory=dict)
    backends: list[BackendSpec] = Field(default_factory=list)
    price_in_per_1k: float = 0.0
    price_out_per_1k: float = 0.0
    # content types it reads: text, image, audio, file, video (others are refused with a 400)
    modalities: list[Modality] = Field(default_factory=lambda: ["text"], min_length=1)
    task: ModelTask = ModelTask.CHAT   # embedding: served on /v1/embeddings only
    cache: CachePolicy | None = None   # response cache (registry.cache_policy); None: off

    @model_validator(mode="after")
    def _builtin_needs_model(self) -> "ModelSpec":
        started = self.engine in (EngineKind.BUILTIN, EngineKind.VLLM) and not self.backends
        if started and not self.model:
            self.model = self.name
        if self.executable and self.engine != EngineKind.VLLM:
            raise ValueError(f"executable applies to engine: vllm, not {self.engine}")
        for flag, value in self.engine_args.items():
            check_engine_arg(flag, value)
        for name, value in self.engine_env.items():
            if not ENV_NAME.match(name) or "\0" in value:
                raise ValueError(f"engine_env: {name!r} is not an environment variable name "
                                 "(or its value holds a NUL)")
        return self


# What a started engine's command line may carry: `--flag value` pairs from engine_args, whose
# names are plain identifiers and whose values are scalars (or lists of them) on one line; the
# executable itself comes from `tiers.executables` (see Settings), never from the admin API.
FLAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_engine_arg(flag: str, value: Any) -> None:
    if not FLAG_NAME.match(flag):
        raise ValueError(f"engine_args: {flag!r} is not a flag name (letters, digits, _ and -)")
    if value is None or isinstance(value, dict):   # None: left out; a dict goes as one JSON value
        return
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, (str, int, float, bool)):
            raise ValueError(f"engine_args.{flag}: values are strings, numbers, booleans, "
                             "objects or lists of scalars")
        if isinstance(item, str) and (_CONTROL.search(item) or len(item) > 4096):
            raise ValueError(f"engine_args.{flag}: a value holds a control character or is "
                             "longer than 4096 characters")


class MlflowSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tracking_uri: str
    prefix: str = ""
    interval_s: float = Field(60.0, gt=0)
    direction: Literal["pull", "push", "both"] = "both"


class ServerSettings(BaseModel):
    """Connection hygiene of the HTTP server (common.connections.ConnectionLimits)."""
    model_config = ConfigDict(extra="forbid")
    keep_alive_s: float = Field(5.0, gt=0)
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    max_connections: int = Field(4096, ge=1)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)

    def limits(self):
        from common.connections import ConnectionLimits

        return ConnectionLimits(**self.model_dump())


class BackendSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # CIDRs and host names backends may live at; empty: anywhere but link-local and metadata
    allowed_networks: list[str] = Field(default_factory=list)


class TierSettings(BaseModel):
    """The `tiers:` settings section: the tier manager's tunables, checked when the file loads
    (unknown keys refused with their path, e.g. `tiers.idle_ss: unknown key`)."""

    model_config = ConfigDict(extra="forbid")
    # Engines the manager may run at once (hot + warm + started cold engines).
    max_engines: int = Field(4, ge=1)
    # A cold engine with no request for this long is stopped (scale to zero).
    idle_s: float = Field(300.0, gt=0)
    # Longest a cold start may take before the waiting requests give up
    # (from settings: engine_ready_timeout_s unless the section sets it).
    start_timeout_s: float = Field(600.0, gt=0)
    # Promotion/demotion between warm and cold: requests per second over `rate_window_s`.
    # Two thresholds (promote above the first, demote below the second) plus a minimum
    # dwell time in a tier, so a rate hovering near one threshold does not flap.
    promote_rps: float = Field(1.0, ge=0)
    demote_rps: float = Field(0.2, ge=0)
    rate_window_s: float = Field(60.0, gt=0)
    min_dwell_s: float = Field(300.0, ge=0)
    # Warm tier: LoRA slots per engine and the shortest residency before an adapter can be
    # evicted (loading costs seconds; evicting a just-loaded adapter would thrash).
    max_loras: int = Field(4, ge=1)
    min_residency_s: float = Field(30.0, ge=0)
    tick_s: float = Field(1.0, gt=0)
    # The executables engines may be started with besides this interpreter (the builtin
    # engine): a model's `executable` (vLLM's CLI, default `vllm` on PATH) must be one of them.
    executables: list[str] = Field(default_factory=lambda: [VLLM_EXECUTABLE])
    host: str = "127.0.0.1"
    # first port of started engines (from settings: engine_port_base + 100 unless set here)
    port_base: int = Field(8200, ge=1, le=65535)

    @model_validator(mode="after")
    def _hysteresis(self) -> "TierSettings":
        if self.demote_rps >= self.promote_rps:
            raise ValueError(f"demote_rps ({self.demote_rps}) must be below promote_rps "
                             f"({self.promote_rps}) for hysteresis")
        return self


AnalysisFamily = Literal["requests", "duration", "ttft", "shadow_requests", "shadow_duration",
                         "shadow_ttft"]


class PrometheusAnalysis(BaseModel):
    """Where rollout analysis reads the gateways' metrics when `analysis.source: prometheus`.

    `queries` replaces the PromQL of a family (control_plane.rollouts.prometheus_source.QUERIES
    has the defaults); a template names its range `{{ window }}` and may use `{{ selector }}`."""
    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=r"^https?://\S+$")              # http://prometheus:9090
    selector: str = Field("", max_length=1000)               # 'namespace="llm",job="gateway"'
    timeout_s: float = Field(5.0, gt=0, le=60)
    # ranges end this far in the past: Prometheus may still be ingesting the newest scrape
    lag_s: float = Field(2.0, ge=0, le=300)
    queries: dict[AnalysisFamily, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _windowed(self) -> "PrometheusAnalysis":
        for family, query in self.queries.items():
            if "{{ window }}" not in query:
                raise ValueError(f"queries.{family}: a template needs its range as "
                                 "{{ window }}, e.g. increase(metric[{{ window }}])")
        return self


class AnalysisSettings(BaseModel):
    """`direct` (the default) scrapes `gateway_metrics_urls` (or the embedded gateway's own
    registry); `prometheus` asks Prometheus, for replicas with no stable URL of their own."""
    model_config = ConfigDict(extra="forbid")
    source: Literal["direct", "prometheus"] = "direct"
    prometheus: PrometheusAnalysis | None = None

    @model_validator(mode="after")
    def _configured(self) -> "AnalysisSettings":
        if self.source == "prometheus" and self.prometheus is None:
            raise ValueError("analysis.source: prometheus needs analysis.prometheus.url")
        return self


class LeaderSettings(BaseModel):
    """How control planes sharing one registry elect the one that leads (control-plane only;
    `inferplane up` is one process and always leads)."""
    model_config = ConfigDict(extra="forbid")
    # database: PostgreSQL's advisory lock (SQLite: one control plane); redis: a lease in Redis
    lock: Literal["database", "redis"] = "database"
    lease_ms: int = Field(10_000, ge=1_000, le=300_000)   # a crashed leader's lease runs out
    key: str = Field("inferplane:leader", min_length=1)


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
        ModelSpec(name=DEFAULT_MODEL),
        ModelSpec(name=DEFAULT_EMBEDDING_MODEL, task=ModelTask.EMBEDDING)])
    routing: RoutingSettings | None = None  # shorthand for gateway.routing (that one wins)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    mlflow: MlflowSettings | None = None  # optional Model Registry sync
    tiers: TierSettings = Field(default_factory=TierSettings)
    leader: LeaderSettings = Field(default_factory=LeaderSettings)
    gateway_metrics_urls: list[str] = Field(default_factory=list)  # rollout analysis (split mode)
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings)
    rollout_tick_s: float = Field(5.0, gt=0, le=300)  # how often rollouts are advanced
    health_interval_s: float = Field(2.0, gt=0, le=300)  # probe rounds of unmanaged backends
    log_level: str = "info"
    server: ServerSettings = Field(default_factory=ServerSettings)
    backends: BackendSettings = Field(default_factory=BackendSettings)
    # guardrail policies (PII, banned terms, moderation, body logging) and who uses them
    guardrails: GuardrailSettings = Field(default_factory=GuardrailSettings)
    # derives each builtin engine's API key; None: <data_dir>/engine.secret (made on first start)
    engine_secret: str | None = None

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'inferplane.db'}"

    @model_validator(mode="after")
    def _gateway_inherits(self) -> "Settings":
        """Top-level `routing:` and `redis_url:` apply to the gateway unless its own section
        sets them."""
        given = self.gateway.model_fields_set
        if self.routing is not None and "routing" not in given:
            self.gateway.routing = self.routing
        if "redis_url" not in given:
            self.gateway.redis_url = self.redis_url
        if self.leader.lock == "redis" and not self.redis_url:
            raise ValueError("leader.lock: redis needs redis_url")
        for i, spec in enumerate(self.models):
            executable = spec.executable or VLLM_EXECUTABLE
            if spec.engine == EngineKind.VLLM and not spec.backends \
                    and executable not in self.tiers.executables:
                raise ValueError(f"models[{i}].executable: {executable!r} is not in "
                                 f"tiers.executables {self.tiers.executables}")
        return self


class SettingsError(ValueError):
    """A settings file refused at load: one line per problem, each naming the key's path."""


def _key_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "(top level)"


def describe_errors(exc: ValidationError, source: str) -> str:
    """`source: gateway.routing.strategyy: unknown key`, one line per error."""
    lines = []
    for error in exc.errors():
        message = ("unknown key" if error["type"] == "extra_forbidden"
                   else str(error["msg"]).removeprefix("Value error, "))
        lines.append(f"{source}: {_key_path(error['loc'])}: {message}")
    return "\n".join(lines)


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
    """The validated settings of a YAML file (the embedded default without one); a file that
    cannot be read or does not fit raises SettingsError naming each bad key's path."""
    if path is None:
        return Settings()
    try:
        raw = yaml.safe_load(interpolate_env(Path(path).read_text())) or {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: {exc}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{path}: the top level must be a mapping")
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, str(path))) from None

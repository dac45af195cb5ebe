"""Gateway configuration (the `gateway:` section of the YAML file, plus `routing` and `redis_url`).

Every section refuses unknown keys; control_plane.settings.load_settings validates the whole
file once and names a bad key by its path (`gateway.routing.strategyy: unknown key`)::

    GatewaySettings.model_validate({"routing": {"strategy": "p2c"}, "retries": 1})
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.auth.jwt_verifier import JWTSettings
from common.vocabulary import RoutingStrategy


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KvEventsSource(_Section):
    """A vLLM backend's KV cache event publisher (its --kv-events-config endpoints)."""
    endpoint: str                       # tcp://host:5557 (PUB)
    replay_endpoint: str | None = None  # tcp://host:5558 (ROUTER): fills sequence gaps
    topic: str = ""
    # vLLM binds its PUB socket only for a wildcard endpoint (tcp://*:5557); given a host, it
    # connects there instead: then the gateway binds `endpoint` (one gateway per publisher)
    bind: bool = False


class RoutingSettings(_Section):
    strategy: RoutingStrategy = RoutingStrategy.LEAST_LOADED
    per_model: dict[str, RoutingStrategy] = Field(default_factory=dict)
    # prefix_aware: characters per hashed prompt block, and per-backend LRU capacity in blocks
    prefix_block_chars: int = Field(256, ge=16)
    prefix_index_blocks: int = Field(50_000, ge=1)
    prefix_precise: bool = False       # use the builtin engine's /kv/summary when available
    # vLLM backends' KV event publishers, by backend id or URL (precise routing for vLLM)
    kv_events: dict[str, KvEventsSource] = Field(default_factory=dict)
    # a backend whose load exceeds the least loaded by this many requests loses prefix preference
    prefix_load_slack: float = Field(4.0, ge=0)
    session_header: str = "x-session-id"
    load_poll_interval_s: float = Field(1.0, ge=0)  # 0 disables engine load polling

    def strategy_for(self, model: str, model_default: str | None = None) -> str:
        return self.per_model.get(model) or model_default or self.strategy


class TimeoutSettings(_Section):
    connect: float = Field(5.0, gt=0)
    first_token: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class LimitDefaults(_Section):
    rpm: int | None = None             # per key when the key sets none; None = unlimited
    tpm: int | None = None
    team_rpm: int | None = None
    team_tpm: int | None = None
    # When Redis is unreachable: admit (fail_open) or refuse with 503 (fail_closed).
    fail_mode: Literal["fail_open", "fail_closed"] = "fail_open"
    # A budget hold not settled within this long (its gateway died) is released.
    budget_hold_s: float = Field(900.0, gt=0)


class AdmissionSettings(_Section):
    queue_size: int = Field(256, ge=0)
    queue_timeout_s: float = Field(30.0, gt=0)
    max_inflight_per_backend: int = Field(256, ge=1)
    cold_start_budget_s: float = Field(120.0, ge=0)  # hold a cold model's request this long


class ShadowSettings(_Section):
    enabled: bool = True
    timeout_s: float = Field(60.0, gt=0)
    max_concurrent: int = Field(16, ge=1)


class TracingSettings(_Section):
    enabled: bool = True               # spans are made; exported only with otlp_endpoint
    service_name: str = "inferplane-gateway"
    otlp_endpoint: str | None = None   # http://collector:4318 (OTLP/HTTP)
    sample_ratio: float = Field(1.0, ge=0, le=1)


class BreakerSettings(_Section):
    failure_threshold: int = Field(5, ge=1)
    open_seconds: float = Field(10.0, gt=0)


class BatchSettings(_Section):
    """OpenAI Files and Batch APIs (gateway/apis/files, gateway/apis/batches, gateway/batch)."""
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=1024)   # larger uploads: 413
    max_lines: int = Field(50_000, ge=1)       # input lines per batch (OpenAI's bound)
    runner: bool = True                        # this process runs batches (leases decide which)
    concurrency: int = Field(8, ge=1)          # lines of a batch in flight at once, per process
    lease_s: float = Field(60.0, gt=0)         # a runner that stops renewing loses its batch
    poll_s: float = Field(1.0, gt=0)           # how often an idle runner looks for work
    max_attempts: int = Field(4, ge=1)         # tries of a line refused 429/502/503/504


class CacheSettings(_Section):
    """The response cache's process-wide bounds (gateway/cache); models opt in per model
    (`cache:` on the model: registry.cache_policy.CachePolicy)."""
    enabled: bool = True               # false: no model is cached, whatever its policy says
    tenant: Literal["team", "key"] = "team"   # who shares answers: the key's team (else key)
    max_entries: int = Field(10_000, ge=1)     # exact and semantic each; LRU past it
    max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    max_entry_bytes: int = Field(1024 * 1024, ge=256)   # larger answers are not stored
    shared: bool = True                # with redis_url: entries shared by every gateway
    embedding_model: str = "all-minilm-l6-v2"   # semantic: the default embedding model
    embedding_timeout_s: float = Field(2.0, gt=0)   # past it the request runs uncached


class GatewaySettings(_Section):
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    retries: int = Field(2, ge=0)      # extra backends tried before the first byte is sent
    # a stream broken mid-way continues on another backend: off | greedy (temperature 0) | always
    resume_streams: Literal["off", "greedy", "always"] = "greedy"
    redis_url: str | None = None       # None = in-memory limits and indexes
    jwt: JWTSettings = Field(default_factory=JWTSettings)
    limits: LimitDefaults = Field(default_factory=LimitDefaults)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    batches: BatchSettings = Field(default_factory=BatchSettings)
    log_level: str = "INFO"
    log_json: bool = True              # JSON lines with request and trace ids
    log_prompts: bool = False
    max_connections: int = Field(2048, ge=1)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    gc_freeze: bool = True             # move start-up objects out of the garbage collector's scans

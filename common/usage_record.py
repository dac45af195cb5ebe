"""What the gateway reports for every finished request (batched to SQL by the control plane
through `state.usage_sinks`, e.g. a common.usage_writer.UsageWriter's `record`)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestBodies:
    """A request's bodies for the body log (a guardrail policy's `body_log`), already redacted
    and truncated by the gateway; `mode` metadata carries no text."""
    mode: str                          # metadata | full
    policy: str | None = None
    request_body: str | None = None
    response_body: str | None = None
    request_chars: int = 0
    response_chars: int = 0
    request_truncated: bool = False
    response_truncated: bool = False
    findings: tuple[dict, ...] = ()    # {rule, action, direction, count}


@dataclass(frozen=True)
class UsageRecord:
    request_id: str
    key_id: str | None
    team: str | None
    model: str
    version: str | None
    backend: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    status: str = "ok"                 # ok | error | aborted
    http_status: int = 200
    stream: bool = False
    created_at: float = field(default_factory=time.time)
    trace_id: str | None = None
    bodies: RequestBodies | None = None   # only for requests whose policy logs bodies
    cache: str | None = None           # hit | miss; None: the response cache was not asked

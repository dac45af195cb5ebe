"""Shared shapes for the generated Prometheus rule files.

Every alert carries summary, description and a runbook_url that points at the
matching heading in alerts/runbooks.md, so an on-call engineer lands on the
right section straight from the notification.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GATEWAY_JOB = "inferplane-gateway"
ENGINE_JOB = "inferplane-engine"
RUNBOOK_BASE = "https://github.com/inferplane/inferplane/blob/main/alerts/runbooks.md"


@dataclass(frozen=True)
class RuleConfig:
    """Knobs of the generated rules; the committed files use the defaults."""

    objective: float = 0.999  # availability SLO (fraction of non-5xx responses)
    ttft_p95_slo_s: float = 2.0
    tpot_p95_slo_s: float = 0.1
    queue_depth_threshold: int = 50
    kv_usage_threshold: float = 0.95
    rejection_ratio_threshold: float = 0.10
    backend_error_ratio_threshold: float = 0.05  # failed / routed requests of one backend
    rollout_step_timeout_s: int = 3600
    runbook_base: str = RUNBOOK_BASE

    @property
    def error_budget(self) -> float:
        return round(1.0 - self.objective, 10)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str  # "page" wakes someone up, "ticket" waits for working hours
    summary: str
    description: str
    labels: dict[str, str] = field(default_factory=dict)

    def to_rule(self, config: RuleConfig) -> dict:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, **self.labels},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{config.runbook_base}#{self.name.lower()}",
            },
        }


def record(name: str, expr: str, labels: dict[str, str] | None = None) -> dict:
    rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def group(name: str, rules: list[dict], interval: str | None = None) -> dict:
    out: dict = {"name": name}
    if interval:
        out["interval"] = interval
    out["rules"] = rules
    return out


def number(value: float) -> str:
    """Render a threshold without float noise (0.0144, not 0.014400000000000001)."""
    return repr(round(value, 10))

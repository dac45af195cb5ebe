"""The registry's tables, one module per aggregate, all on `base.Base`'s one metadata:

    base            Base, the timestamp and row_version mixins, utcnow, one_of
    catalog         models, versions, aliases (and their history), adapters, backends
    rollouts        rollouts and their events
    slos            service-level objectives
    access          teams and API keys
    usage           per-minute usage buckets and their hourly and daily rollups
    audit           the audit trail and the registry_state version
    batches         OpenAI files, batches and their per-line results
    request_log     per-request history
    guardrails      guardrail policies, their bindings, stored request bodies
    mlflow_state    the MLflow sync's agreed aliases

Tables refer to other aggregates by table or class name only (`ForeignKey("models.id")`,
`relationship("Rollout")`). Importing this package loads every module, so `Base.metadata`
(Alembic's target, create_all) holds every table; queries live outside, in registry/.
"""
from registry.orm import (  # noqa: F401  (every table on Base.metadata)
    access,
    audit,
    batches,
    catalog,
    guardrails,
    mlflow_state,
    request_log,
    rollouts,
    slos,
    usage,
)
from registry.orm.base import Base

__all__ = ["Base"]

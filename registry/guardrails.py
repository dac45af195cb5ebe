"""Guardrail policies and stored bodies in SQL (tables in registry.orm.guardrails).

    view = guardrails_view(session)           # what build_snapshot hands the gateway
    append_bodies(session, rows)              # the usage sink's batch of body rows
    prune_bodies(session, older_than=dt)      # rows deleted
    upsert_policy(session, "strict", spec)    # the policy row (created or its spec replaced)
    bind_policy(session, policy, model="smollm2")   # or key_id=3: replaces that target's binding
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, selectinload

from registry.orm.guardrails import GuardrailBinding, GuardrailPolicy, RequestBody

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class PolicyView:
    name: str
    revision: int            # the row version: the gateway recompiles when it moves
    spec: Mapping[str, Any]  # common.guardrail_spec.PolicySpec as JSON


@dataclass(frozen=True)
class GuardrailsView:
    """Which policy applies to a request: its key's, else its model's, else none."""
    policies: Mapping[str, PolicyView] = field(default_factory=lambda: _EMPTY)
    models: Mapping[str, str] = field(default_factory=lambda: _EMPTY)   # model → policy
    keys: Mapping[int, str] = field(default_factory=lambda: _EMPTY)     # key id → policy

    def policy_for(self, model: str, key_id: int | None) -> PolicyView | None:
        name = self.keys.get(key_id) if key_id is not None and self.keys else None
        if name is None:
            name = self.models.get(model)
        return None if name is None else self.policies.get(name)

    def __bool__(self) -> bool:
        return bool(self.models or self.keys)


def guardrails_view(session: Session) -> GuardrailsView:
    rows = session.scalars(select(GuardrailPolicy).options(
        selectinload(GuardrailPolicy.bindings))).all()
    policies = {p.name: PolicyView(p.name, p.row_version, MappingProxyType(dict(p.spec)))
                for p in rows}
    models = {b.model: p.name for p in rows for b in p.bindings if b.model is not None}
    keys = {b.key_id: p.name for p in rows for b in p.bindings if b.key_id is not None}
    return GuardrailsView(MappingProxyType(policies), MappingProxyType(models),
                          MappingProxyType(keys))


def upsert_policy(session: Session, name: str, spec: dict[str, Any]) -> GuardrailPolicy:
    policy = session.scalar(select(GuardrailPolicy).where(GuardrailPolicy.name == name))
    if policy is None:
        policy = GuardrailPolicy(name=name, spec=spec)
        session.add(policy)
    elif policy.spec != spec:
        policy.spec = spec
    session.flush()
    return policy


def bind_policy(session: Session, policy: GuardrailPolicy, *, model: str | None = None,
                key_id: int | None = None) -> GuardrailBinding:
    """Bind `policy` to one model or one key, replacing whatever policy that target had."""
    column = GuardrailBinding.model if model is not None else GuardrailBinding.key_id
    binding = session.scalar(select(GuardrailBinding).where(
        column == (model if model is not None else key_id)))
    if binding is None:
        binding = GuardrailBinding(policy_id=policy.id, model=model, key_id=key_id)
        session.add(binding)
    else:
        binding.policy_id = policy.id
    session.flush()
    return binding


def append_bodies(session: Session, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(RequestBody), rows)


def prune_bodies(session: Session, older_than: datetime) -> int:
    return session.execute(delete(RequestBody).where(RequestBody.created_at < older_than)).rowcount


__all__ = ["GuardrailsView", "PolicyView", "append_bodies", "bind_policy", "guardrails_view",
           "prune_bodies", "upsert_policy"]

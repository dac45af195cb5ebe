"""RoutingSnapshot: the frozen, versioned view of the registry the gateway routes from.

The gateway never queries SQL on a request; it reads `snapshot_source.current`, which the
control plane rebuilds (build_snapshot) whenever registry_state.version changes.

Name resolution: a request's `model` is either a model name (traffic follows the model's
`splits`, i.e. the `default` alias) or "<model>:<alias>" listed in `aliases` (pinned to the
alias's version, or split between stable and candidate while a rollout moves that alias).
`RoutingSnapshot.resolve()` implements both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from common.vocabulary import RolloutState, SplitMode
from registry.cache_policy import CachePolicy, policy_of
from registry.guardrails import GuardrailsView, guardrails_view
from registry.orm.access import ApiKey, Team
from registry.orm.catalog import Alias, Backend, Model
from registry.orm.rollouts import Rollout
from registry.queries import get_snapshot_version
from registry.serialize import as_utc

DEFAULT_ALIAS = "default"  # the version plain model-name traffic goes to (no rollout active)
ACTIVE_ROLLOUT_STATES = (RolloutState.RUNNING, RolloutState.PAUSED)
EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class BackendView:
    id: str
    url: str  # OpenAI base URL, e.g. http://127.0.0.1:8101/v1
    engine: str
    served_model: str
    gpu: str | None
    weight: float
    tier: str
    state: str  # ready | starting | down | draining
    adapters: tuple[str, ...]
    version: str | None
    managed: bool = False


@dataclass(frozen=True)
class SplitView:
    version: str
    weight: float  # share of traffic; for a shadow split, the share copied fire-and-forget
    shadow: bool = False


@dataclass(frozen=True)
class ModelView:
    name: str
    context_length: int | None
    backends: tuple[BackendView, ...]
    routing: str | None  # None: the gateway's configured strategy
    fallbacks: tuple[str, ...]
    tier: str
    price_in_per_1k: float
    price_out_per_1k: float
    splits: tuple[SplitView, ...]  # empty: no version split, every backend serves the model
    aliases: Mapping[str, str] = field(default_factory=lambda: EMPTY)  # alias → version label
    adapters: tuple[str, ...] = ()
    # splits of "<model>:<alias>" requests for an alias a rollout is moving
    alias_splits: Mapping[str, tuple[SplitView, ...]] = field(default_factory=lambda: EMPTY)
    modalities: tuple[str, ...] = ("text",)  # content types it reads (gateway.request_path.modalities)
    task: str = "chat"  # ModelTask: chat, or embedding (served on /v1/embeddings only)
    cache: CachePolicy | None = None  # response cache (gateway/cache); None: not cached

    def backends_for(self, version: str | None) -> tuple[BackendView, ...]:
        if version is None:
            return self.backends
        return tuple(b for b in self.backends if b.version == version)


@dataclass(frozen=True)
class KeyView:
    key_id: int
    key_hash: str
    name: str
    team: str | None
    role: str  # admin | operator | user
    models: tuple[str, ...] | None  # None: every model
    rpm_limit: int | None
    tpm_limit: int | None
    max_budget: float | None
    priority: str  # high | standard | batch
    expires_at: float | None  # unix seconds
    revoked: bool
    spend: float = 0.0
    budget_period: str | None = None  # None: max_budget is for the key's lifetime


@dataclass(frozen=True)
class TeamView:
    name: str
    rpm_limit: int | None
    tpm_limit: int | None
    max_budget: float | None
    spend: float
    budget_period: str | None = None


@dataclass(frozen=True)
class RoutingSnapshot:
    version: int
    models: Mapping[str, ModelView]
    aliases: Mapping[str, str]  # "<model>:<alias>" → model name
    keys: Mapping[str, KeyView]  # key_hash → key
    teams: Mapping[str, TeamView] = field(default_factory=lambda: EMPTY)
    # guardrail policies and which models / keys use them (empty: no request is inspected)
    guardrails: GuardrailsView = field(default_factory=GuardrailsView)

    def resolve(self, requested: str) -> tuple[ModelView, str | None] | None:
        """(model, pinned version or None) for a request's model string, or None if unknown."""
        model = self.models.get(requested)
        if model is not None:
            return model, None
        target = self.aliases.get(requested)
        if target is None or target not in self.models:
            return None
        model = self.models[target]
        alias = requested.split(":", 1)[1]
        splits = model.alias_splits.get(alias)
        if splits is not None:  # under a rollout: the split decides, as for plain names
            return replace(model, splits=splits), None
        return model, model.aliases.get(alias)

    @classmethod
    def empty(cls) -> RoutingSnapshot:
        return cls(version=0, models=EMPTY, aliases=EMPTY, keys=EMPTY)


def _backend_view(backend: Backend) -> BackendView:
    return BackendView(
        id=str(backend.id), url=backend.url, engine=backend.engine,
        served_model=backend.served_model, gpu=backend.gpu_type, weight=backend.weight,
        tier=backend.tier, state=backend.state,
        adapters=tuple(sorted(a.name for a in backend.adapters)),
        version=backend.version.label if backend.version else None, managed=backend.managed)


def _traffic(model: Model, aliases: Mapping[str, str]
             ) -> tuple[tuple[SplitView, ...], dict[str, tuple[SplitView, ...]]]:
    """(splits of plain model-name requests, {alias: splits} for the alias a rollout moves)."""
    base = aliases.get(DEFAULT_ALIAS)
    plain = (SplitView(base, 1.0),) if base else ()
    rollout = next((r for r in model.rollouts if r.state in ACTIVE_ROLLOUT_STATES), None)
    if rollout is None:
        return plain, {}
    alias = rollout.spec.get("alias", DEFAULT_ALIAS)
    stable = rollout.from_version.label if rollout.from_version else aliases.get(alias)
    splits = _rollout_splits(rollout, stable)
    return (splits if alias == DEFAULT_ALIAS else plain), {alias: splits}


def _rollout_splits(rollout: Rollout, stable: str | None) -> tuple[SplitView, ...]:
    candidate = rollout.to_version.label
    weight = min(max(rollout.weight, 0.0), 1.0)
    if rollout.spec.get("mode") == SplitMode.SHADOW:
        primary = (SplitView(stable, 1.0),) if stable else ()
        return primary + (SplitView(candidate, weight, shadow=True),)
    if not stable:
        return (SplitView(candidate, 1.0),)
    return (SplitView(stable, 1.0 - weight), SplitView(candidate, weight))


def _model_view(model: Model) -> ModelView:
    aliases = {a.name: a.version.label for a in model.aliases}
    splits, alias_splits = _traffic(model, aliases)
    return ModelView(
        name=model.name, context_length=model.context_length,
        backends=tuple(_backend_view(b) for b in sorted(model.backends, key=lambda b: b.id)),
        routing=model.routing, fallbacks=tuple(model.fallbacks or ()), tier=model.tier,
        price_in_per_1k=model.price_in_per_1k, price_out_per_1k=model.price_out_per_1k,
        splits=splits, aliases=MappingProxyType(aliases),
        adapters=tuple(sorted(a.name for a in model.adapters)),
        alias_splits=MappingProxyType(alias_splits),
        modalities=tuple(model.modalities or ("text",)), task=model.task or "chat",
        cache=policy_of(model.cache))


def _key_view(key: ApiKey) -> KeyView:
    expires = as_utc(key.expires_at)
    return KeyView(
        key_id=key.id, key_hash=key.key_hash, name=key.name, team=key.team, role=key.role,
        models=tuple(key.models) if key.models is not None else None,
        rpm_limit=key.rpm_limit, tpm_limit=key.tpm_limit, max_budget=key.max_budget,
        priority=key.priority, expires_at=expires.timestamp() if expires else None,
        revoked=key.revoked_at is not None, spend=key.spend, budget_period=key.budget_period)


def build_snapshot(session: Session) -> RoutingSnapshot:
    # Version first: data read afterwards is at least this new, so a snapshot is never
    # labelled newer than its contents (a concurrent change just triggers one more rebuild).
    version = get_snapshot_version(session)
    models = session.scalars(select(Model).order_by(Model.name).options(
        selectinload(Model.aliases).selectinload(Alias.version),
        selectinload(Model.backends).selectinload(Backend.version),
        selectinload(Model.backends).selectinload(Backend.adapters),
        selectinload(Model.adapters),
        selectinload(Model.rollouts).selectinload(Rollout.from_version),
        selectinload(Model.rollouts).selectinload(Rollout.to_version),
    )).all()
    model_views = {m.name: _model_view(m) for m in models}
    aliases = {f"{m.name}:{a}": m.name for m in model_views.values() for a in m.aliases}
    keys = {k.key_hash: _key_view(k) for k in session.scalars(select(ApiKey))}
    teams = {t.name: TeamView(t.name, t.rpm_limit, t.tpm_limit, t.max_budget, t.spend,
                              t.budget_period)
             for t in session.scalars(select(Team))}
    return RoutingSnapshot(version=version, models=MappingProxyType(model_views),
                           aliases=MappingProxyType(aliases), keys=MappingProxyType(keys),
                           teams=MappingProxyType(teams),
                           guardrails=guardrails_view(session))


__all__ = ["BackendView", "KeyView", "ModelView", "RoutingSnapshot", "SplitView", "TeamView",
           "build_snapshot", "DEFAULT_ALIAS"]

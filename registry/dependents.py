"""What depends on a catalogue row, checked before the row is deleted.

    check_model_unused(session, model)            # live rollouts, other models' fallbacks
    check_version_unused(session, model, version) # live rollouts, aliases that serve it
    check_alias_unused(session, model, alias)     # the live rollout that moves it

The schema cascades deletes (a model takes its versions, aliases and rollouts with it), so
without these checks a delete would silently end a rollout or leave a fallback pointing at
nothing. Each raises ConflictError (409) naming what still depends on the row.
"""
from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from common.vocabulary import RolloutState
from registry.errors import ConflictError
from registry.orm.catalog import Alias, Model, ModelVersion
from registry.orm.rollouts import Rollout

LIVE_ROLLOUT_STATES = (RolloutState.PENDING, RolloutState.RUNNING,  # not yet promoted,
                       RolloutState.PAUSED)                     # rolled back, aborted


def _live_rollouts(session: Session, model: Model):
    return select(Rollout).where(Rollout.model_id == model.id,
                                 Rollout.state.in_(LIVE_ROLLOUT_STATES)).order_by(Rollout.id)


def _refuse(what: str, users: list[str], code: str, param: str) -> None:
    raise ConflictError(f"{what} is in use by {'; '.join(users)}; remove those first",
                        param=param, code=code)


def check_model_unused(session: Session, model: Model) -> None:
    rollouts = [f"rollout {r.id}" for r in session.scalars(_live_rollouts(session, model))]
    falling_back = sorted(m.name for m in session.scalars(select(Model).where(Model.id != model.id))
                          if model.name in (m.fallbacks or ()))
    users = rollouts + ([f"the fallbacks of model(s) {', '.join(falling_back)}"]
                        if falling_back else [])
    if users:
        _refuse(f"model '{model.name}'", users, "model_in_use", "name")


def check_version_unused(session: Session, model: Model, version: ModelVersion) -> None:
    rollouts = session.scalars(_live_rollouts(session, model).where(or_(
        Rollout.to_version_id == version.id, Rollout.from_version_id == version.id)))
    users = [f"rollout {r.id}" for r in rollouts]
    aliases = sorted(session.scalars(select(Alias.name).where(Alias.version_id == version.id)))
    if aliases:
        users.append(f"alias(es) {', '.join(aliases)}")
    loras = sorted(session.scalars(select(ModelVersion.label).where(
        ModelVersion.base_version_id == version.id)))
    if loras:
        users.append(f"lora version(s) {', '.join(loras)} built on it")
    if users:
        _refuse(f"version '{version.label}' of model '{model.name}'", users, "version_in_use",
                "version")


def check_alias_unused(session: Session, model: Model, alias: str) -> None:
    users = [f"rollout {r.id}" for r in session.scalars(_live_rollouts(session, model))
             if (r.spec or {}).get("alias", "default") == alias]
    if users:
        _refuse(f"alias '{alias}' of model '{model.name}'", users, "alias_in_use", "alias")


__all__ = ["LIVE_ROLLOUT_STATES", "check_alias_unused", "check_model_unused",
           "check_version_unused"]

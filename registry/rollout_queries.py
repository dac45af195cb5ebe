"""Rollouts: moving a model's traffic from one version to another in weighted steps.

The state machine lives here so the admin API (people) and the rollout controller (metrics)
drive the same transitions, each recorded as a rollout_event. Promotion repoints the model's
default alias, which is what plain model-name traffic follows once no rollout is active."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.errors import ConflictError, InvalidError, NotFoundError
from registry.models import Model, Rollout, RolloutEvent
from registry.queries import get_version, set_alias
from registry.snapshot import DEFAULT_ALIAS

ACTIVE = ("pending", "running", "paused")
DEFAULT_STEPS = (0.05, 0.25, 0.5, 1.0)

# action → (states it may start from, resulting state)
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "start": (("pending",), "running"),
    "pause": (("running",), "paused"),
    "resume": (("paused",), "running"),
    "advance": (("running", "paused"), "running"),
    "promote": (ACTIVE, "promoted"),
    "rollback": (ACTIVE, "rolled_back"),
    "abort": (ACTIVE, "aborted"),
}


def get_rollout(session: Session, model: Model, rollout_id: int) -> Rollout:
    rollout = session.get(Rollout, rollout_id)
    if rollout is None or rollout.model_id != model.id:
        raise NotFoundError(f"model '{model.name}' has no rollout {rollout_id}", param="rollout_id")
    return rollout


def active_rollout(session: Session, model: Model) -> Rollout | None:
    return session.scalar(select(Rollout).where(
        Rollout.model_id == model.id, Rollout.state.in_(ACTIVE)))


def create_rollout(session: Session, model: Model, to_version: str, *,
                   from_version: str | None = None, spec: dict[str, Any] | None = None,
                   start: bool = False, actor: str = "") -> Rollout:
    existing = active_rollout(session, model)
    if existing is not None:
        raise ConflictError(f"model '{model.name}' already has an active rollout ({existing.id}, "
                            f"{existing.state}); finish it first", code="rollout_active")
    target = get_version(session, model, to_version)
    source = _source_version(session, model, from_version)
    if source is not None and source.id == target.id:
        raise InvalidError("to_version is already the version being served", param="to_version")
    spec = dict(spec or {})
    spec.setdefault("steps", list(DEFAULT_STEPS))
    rollout = Rollout(model_id=model.id, from_version_id=source.id if source else None,
                      to_version_id=target.id, spec=spec, state="pending", step=0, weight=0.0)
    session.add(rollout)
    session.flush()
    _event(session, rollout, "created", actor)
    if start:
        apply_action(session, model, rollout, "start", actor)
    return rollout


def _source_version(session: Session, model: Model, label: str | None):
    if label:
        return get_version(session, model, label)
    for alias in model.aliases:
        if alias.name == DEFAULT_ALIAS:
            return alias.version
    return None


def apply_action(session: Session, model: Model, rollout: Rollout, action: str, actor: str,
                 measurements: dict[str, Any] | None = None, message: str = "") -> RolloutEvent:
    if action not in TRANSITIONS:
        raise InvalidError(f"unknown rollout action '{action}'; expected one of "
                           f"{', '.join(TRANSITIONS)}", param="action")
    allowed, new_state = TRANSITIONS[action]
    if rollout.state not in allowed:
        raise ConflictError(f"cannot {action} a rollout that is {rollout.state}",
                            code="invalid_transition")
    steps = list(rollout.spec.get("steps") or DEFAULT_STEPS)
    if action == "start":
        rollout.step, rollout.weight = 0, steps[0]
    elif action == "advance":
        if rollout.step + 1 >= len(steps):
            return apply_action(session, model, rollout, "promote", actor, measurements, message)
        rollout.step += 1
        rollout.weight = steps[rollout.step]
    elif action == "promote":
        rollout.weight = 1.0
        set_alias(session, model, DEFAULT_ALIAS, rollout.to_version.label, actor)
    elif action in ("rollback", "abort"):
        rollout.weight = 0.0
    rollout.state = new_state
    if measurements:
        rollout.measurements = {**rollout.measurements, **measurements}
    session.flush()
    return _event(session, rollout, action, actor, measurements, message)


def _event(session: Session, rollout: Rollout, kind: str, actor: str,
           measurements: dict[str, Any] | None = None, message: str = "") -> RolloutEvent:
    text = f"{message} (by {actor})" if actor and message else message or (f"by {actor}" if actor else "")
    event = RolloutEvent(rollout_id=rollout.id, kind=kind, step=rollout.step,
                         weight=rollout.weight, measurements=measurements or {}, message=text)
    session.add(event)
    session.flush()
    return event

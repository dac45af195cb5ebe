"""Creating, finding and rendering rollout rows.

A new rollout is checked against the registry before it is written: the model, the alias it
moves and the candidate version must exist, the candidate must differ from what the alias
serves, and a model runs one rollout at a time.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.vocabulary import BackendState, RolloutState
from common.vocabulary import RolloutPhase as Phase
from control_plane.rollouts.spec import ACTIVE_PHASES, DB_STATE, RolloutCreate, split_mode
from control_plane.rollouts.transitions import enter, phase_of, spec_of, status_of
from registry.errors import ConflictError, NotFoundError
from registry.orm.catalog import Alias, Backend, Model, ModelVersion
from registry.orm.rollouts import Rollout
from registry.queries import get_model
from registry.serialize import as_utc

ACTIVE_DB_STATES = tuple(sorted({DB_STATE[p] for p in ACTIVE_PHASES}))


def load(session: Session, rollout_id: int) -> Rollout:
    rollout = session.get(Rollout, rollout_id, options=[
        selectinload(Rollout.events), selectinload(Rollout.to_version),
        selectinload(Rollout.from_version)])
    if rollout is None:
        raise NotFoundError(f"rollout {rollout_id} does not exist", param="rollout_id")
    return rollout


def active_ids(session: Session) -> list[int]:
    return list(session.scalars(select(Rollout.id).where(Rollout.state.in_(ACTIVE_DB_STATES))
                                .order_by(Rollout.id)))


def active_for_model(session: Session, model_id: int) -> Rollout | None:
    return session.scalar(select(Rollout).where(
        Rollout.model_id == model_id, Rollout.state.in_(ACTIVE_DB_STATES)).limit(1))


def candidate_ready(session: Session, rollout: Rollout) -> bool:
    """The health gate: some backend of the candidate version is ready to serve."""
    return session.scalar(select(Backend.id).where(
        Backend.version_id == rollout.to_version_id,
        Backend.state == BackendState.READY).limit(1)) is not None


def create(session: Session, body: RolloutCreate, now: float) -> Rollout:
    model = get_model(session, body.model)
    alias = session.scalar(select(Alias).where(Alias.model_id == model.id,
                                               Alias.name == body.alias))
    if alias is None:
        raise _unprocessable(f"model '{model.name}' has no alias '{body.alias}'; a rollout "
                             f"moves an existing alias (create it with PUT "
                             f"/admin/v1/models/{model.name}/aliases/{body.alias})", "alias")
    candidate = _version(session, model, body.candidate_version)
    if candidate.id == alias.version_id:
        raise _unprocessable(f"alias '{body.alias}' already serves version "
                             f"'{candidate.label}'; nothing to roll out", "candidate_version")
    busy = active_for_model(session, model.id)
    if busy is not None:
        raise ConflictError(f"model '{model.name}' already has rollout {busy.id} "
                            f"({phase_of(busy)}); abort or finish it first",
                            param="model", code=ErrorCode.ROLLOUT_IN_PROGRESS)
    spec = body.model_dump(mode="json") | {"mode": split_mode(body.strategy, Phase.PENDING)}
    rollout = Rollout(model_id=model.id, from_version_id=alias.version_id,
                      to_version_id=candidate.id, spec=spec, state=RolloutState.PENDING, step=0,
                      weight=0.0, measurements={"failures": 0})
    session.add(rollout)
    session.flush()
    enter(session, rollout, Phase.PENDING, "created", now)
    session.flush()
    return rollout


def _version(session: Session, model: Model, label: str) -> ModelVersion:
    version = session.scalar(select(ModelVersion).where(
        ModelVersion.model_id == model.id, ModelVersion.label == label))
    if version is None:
        known = sorted(session.scalars(select(ModelVersion.label).where(
            ModelVersion.model_id == model.id)))
        raise _unprocessable(f"model '{model.name}' has no version '{label}' (known: "
                             f"{', '.join(known) or 'none'})", "candidate_version")
    return version


def _unprocessable(message: str, param: str) -> OpenAIError:
    return OpenAIError(422, message, param=param, code=ErrorCode.INVALID_VALUE)


def render(rollout: Rollout, model_name: str) -> dict[str, Any]:
    spec, status = spec_of(rollout), status_of(rollout)
    events = [_event(e) for e in rollout.events]
    return {
        "id": rollout.id, "object": "rollout", "model": model_name, "alias": spec.alias,
        "strategy": spec.strategy, "state": phase_of(rollout), "reason": status.get("reason"),
        "stable_version": rollout.from_version.label if rollout.from_version else None,
        "candidate_version": rollout.to_version.label,
        "step": rollout.step, "steps": len(spec.steps), "weight": rollout.weight,
        "step_started_at": status.get("step_started_at"),
        "failures": status.get("failures", 0), "inconclusive": status.get("inconclusive", 0),
        "last_measurement": status.get("last_measurement"), "force": spec.force,
        "spec": spec.model_dump(mode="json"),
        "measurements": [e for e in events if e["kind"] == "measurement"],
        "events": [e for e in events if e["kind"] != "measurement"],
        "row_version": rollout.row_version,
        "created_at": as_utc(rollout.created_at).isoformat(),
        "updated_at": as_utc(rollout.updated_at).isoformat(),
    }


def _event(event) -> dict[str, Any]:
    return {"at": as_utc(event.at).isoformat(), "kind": event.kind, "step": event.step,
            "weight": event.weight, "message": event.message, **(
                {"result": event.measurements} if event.measurements else {})}


def model_names(session: Session, rollouts: list[Rollout]) -> dict[int, str]:
    ids = {r.model_id for r in rollouts}
    return dict(session.execute(select(Model.id, Model.name).where(Model.id.in_(ids))).all())


__all__ = ["active_for_model", "active_ids", "candidate_ready", "create", "load", "model_names", "render"]

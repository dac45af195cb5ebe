"""Phase changes of one rollout row, shared by the controller and the admin API.

Each function mutates the row inside the caller's transaction and appends a RolloutEvent;
the caller audits and bumps the snapshot version in the same transaction, so routing,
history and audit move together. JSON columns are reassigned, never mutated in place
(SQLAlchemy only notices assignment).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from common.error_codes import ErrorCode
from common.vocabulary import RolloutPhase as Phase
from control_plane.rollouts.analysis import Measurement
from control_plane.rollouts.spec import DB_STATE, RolloutCreate, split_mode
from control_plane.rollouts.verdicts import Decision
from registry.errors import ConflictError
from registry.orm.catalog import Model
from registry.orm.rollouts import Rollout, RolloutEvent
from registry.queries import set_alias


def spec_of(rollout: Rollout) -> RolloutCreate:
    return RolloutCreate.model_validate({k: v for k, v in rollout.spec.items() if k != "mode"})


def status_of(rollout: Rollout) -> dict[str, Any]:
    return dict(rollout.measurements or {})


def phase_of(rollout: Rollout) -> str:
    return status_of(rollout).get("phase", Phase.PENDING)


def _event(session: Session, rollout: Rollout, kind: str, message: str,
           measurement: dict | None = None) -> None:
    session.add(RolloutEvent(rollout_id=rollout.id, kind=kind, step=rollout.step,
                             weight=rollout.weight, measurements=measurement or {},
                             message=message))


def enter(session: Session, rollout: Rollout, phase: str, reason: str, now: float,
          detail: dict | None = None, **status: Any) -> None:
    """Move to `phase`; `status` adds or overrides fields of the row's status; `detail`
    (e.g. the measurement behind the move) is kept on the phase's event."""
    spec = spec_of(rollout)
    current = status_of(rollout)
    current.update(status, phase=phase, reason=reason, since=now)
    rollout.measurements = current
    rollout.state = DB_STATE[phase]
    mode = split_mode(spec.strategy, phase)
    if rollout.spec.get("mode") != mode:
        rollout.spec = {**rollout.spec, "mode": mode}
    _event(session, rollout, phase, reason, detail)


def start_step(session: Session, rollout: Rollout, index: int, reason: str, now: float) -> None:
    steps = spec_of(rollout).steps
    rollout.step = index
    rollout.weight = steps[index].weight
    enter(session, rollout, Phase.PROGRESSING, reason, now, step_started_at=now, passed_in_step=0,
          inconclusive=0)


def promote(session: Session, rollout: Rollout, actor: str, reason: str, now: float) -> None:
    """The atomic alias swap: alias and weight change in the caller's one transaction."""
    spec = spec_of(rollout)
    model = session.get(Model, rollout.model_id)
    set_alias(session, model, spec.alias, rollout.to_version.label, actor)
    rollout.weight = 1.0
    enter(session, rollout, Phase.PROMOTING, reason, now)


def abort(session: Session, rollout: Rollout, reason: str, now: float,
          detail: dict | None = None) -> None:
    """Rollback: the candidate's share drops to 0; the alias was never touched."""
    rollout.weight = 0.0
    enter(session, rollout, Phase.ABORTING, reason, now, detail)


def pause(session: Session, rollout: Rollout, reason: str, now: float) -> None:
    """Hold the rollout for an operator. The candidate's share drops to 0 (the stable version
    serves everything): whatever prompted the pause, a possibly failing candidate must not
    keep serving while nobody decides. Resuming restarts the step at its weight."""
    resume_to = phase_of(rollout)
    rollout.weight = 0.0
    enter(session, rollout, Phase.PAUSED, reason, now, resume_phase=resume_to)


def resume(session: Session, rollout: Rollout, reason: str, now: float) -> None:
    target = status_of(rollout).get("resume_phase", Phase.PROGRESSING)
    if target == Phase.PROGRESSING:
        # The interrupted step starts over: its pause and its passing measurement are owed.
        start_step(session, rollout, rollout.step, reason, now)
    else:
        enter(session, rollout, target, reason, now)


def finish(session: Session, rollout: Rollout, reason: str, now: float) -> None:
    final = Phase.SUCCEEDED if phase_of(rollout) == Phase.PROMOTING else Phase.ROLLED_BACK
    enter(session, rollout, final, reason, now, finished_at=now)


def record_measurement(session: Session, rollout: Rollout, measurement: Measurement,
                       decision: Decision) -> None:
    """The measurement and the counters it moved, as one event with its numbers."""
    status = status_of(rollout)
    status.update(decision.counters)
    result = measurement.as_dict() | {"decision": decision.note, **decision.counters}
    status["last_measurement"] = result
    rollout.measurements = status
    _event(session, rollout, "measurement",
           f"{measurement.verdict}: {measurement.message} ({decision.note})", result)


ALLOWED = {  # operator action → phases it may start from
    "promote": (Phase.PENDING, Phase.PROGRESSING, Phase.PAUSED),
    "abort": (Phase.PENDING, Phase.PROGRESSING, Phase.PAUSED),
    "pause": (Phase.PENDING, Phase.PROGRESSING),
    "resume": (Phase.PAUSED,),
}


def check_allowed(rollout: Rollout, action: str) -> None:
    phase = phase_of(rollout)
    if phase not in ALLOWED[action]:
        allowed = ", ".join(ALLOWED[action])
        raise ConflictError(f"rollout {rollout.id} is {phase}; {action} needs one of: {allowed}",
                            param="state", code=ErrorCode.INVALID_STATE)


__all__ = ["abort", "check_allowed", "enter", "finish", "pause", "phase_of", "promote",
           "record_measurement", "resume", "spec_of", "start_step", "status_of"]

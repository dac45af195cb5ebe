"""/admin/v1/rollouts: start, watch and steer progressive rollouts (operators and admins).

Bodies are validated here rather than by FastAPI so a bad rollout is a 422 that names the
field (the gateway's global handler would make it a generic 400). Every change goes
through AdminContext.change: audited, snapshot version bumped, snapshot refreshed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Query
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.openapi_doc import openapi_body
from control_plane.admin.common import (ADMIN_PREFIX, AdminContext, Page, PageDep, RowId, actor_of,
                                        install_admin_error_handlers, operator, paginate)
from control_plane.rollouts import store
from control_plane.rollouts import transitions as t
from control_plane.rollouts.spec import DB_STATE, PHASES, ResumeBody, RolloutCreate
from registry.json_values import check_storable
from registry.orm.catalog import Model
from registry.orm.rollouts import Rollout
from registry.queries import get_model

if TYPE_CHECKING:  # slo.py reads Scrape from this package
    from control_plane.slo import SloTracker


def build_rollouts_router(ctx: AdminContext, slo: SloTracker | None = None, *,
                          clock: Callable[[], float] = time.time) -> APIRouter:
    router = APIRouter(prefix="/rollouts", tags=["admin: rollouts"])

    @router.post("", status_code=201, openapi_extra=openapi_body(RolloutCreate))
    def create(payload: dict[str, Any] = Body(...), who: Principal = Depends(operator)):
        body = _validated(RolloutCreate, payload)
        with ctx.change(who, "create_rollout", "rollout") as change:
            if slo is not None and not body.force:
                _refuse_if_budget_spent(change.session, slo, body.model)
            rollout = store.create(change.session, body, clock())
            change.resource_id = rollout.id
            change.after = {"model": body.model, **body.model_dump(mode="json")}
        return _get(ctx, rollout.id)

    @router.get("")
    def list_rollouts(model: str | None = Query(None, max_length=200),
                      state: str | None = Query(None, json_schema_extra={"enum": [*PHASES]}),
                      page: Page = PageDep, _: Principal = Depends(operator)):
        if state is not None and state not in PHASES:
            raise OpenAIError(400, f"state must be one of {', '.join(PHASES)}; got {state!r}",
                              param="state", code=ErrorCode.INVALID_VALUE)
        with ctx.read() as session:
            stmt = select(Rollout).order_by(Rollout.id.desc())
            if model is not None:
                stmt = stmt.where(Rollout.model_id == get_model(session, model).id)
            if state is not None:
                # The column is coarser than the phase; filter on it, then on the phase.
                stmt = stmt.where(Rollout.state == DB_STATE[state])
                stmt = stmt.where(Rollout.id.in_(_ids_in_phase(session, stmt, state)))
            names = dict(session.execute(select(Model.id, Model.name)).all())
            return paginate(session, stmt, page,
                            lambda r: store.render(r, names[r.model_id]))

    @router.get("/{rollout_id}")
    def get(rollout_id: RowId, _: Principal = Depends(operator)):
        return _get(ctx, rollout_id)

    def _act(rollout_id: int, action: str, who: Principal, apply) -> dict[str, Any]:
        with ctx.change(who, f"{action}_rollout", "rollout") as change:
            rollout = store.load(change.session, rollout_id)
            t.check_allowed(rollout, action)
            change.resource_id = rollout_id
            change.before = _summary(rollout)
            apply(change.session, rollout, f"{action} by {who.name}", clock())
            change.after = _summary(rollout)
        return _get(ctx, rollout_id)

    @router.post("/{rollout_id}/promote")
    def promote(rollout_id: RowId, who: Principal = Depends(operator)):
        return _act(rollout_id, "promote", who, lambda s, r, why, now:
                    t.promote(s, r, actor_of(who), why, now))

    @router.post("/{rollout_id}/abort")
    def abort(rollout_id: RowId, who: Principal = Depends(operator)):
        return _act(rollout_id, "abort", who, t.abort)

    @router.post("/{rollout_id}/pause")
    def pause(rollout_id: RowId, who: Principal = Depends(operator)):
        return _act(rollout_id, "pause", who, t.pause)

    @router.post("/{rollout_id}/resume", openapi_extra=openapi_body(ResumeBody, required=False))
    def resume(rollout_id: RowId, payload: dict[str, Any] | None = Body(None),
               who: Principal = Depends(operator)):
        body = _validated(ResumeBody, payload or {})

        def apply(session, rollout, why, now):
            if body.force is not None:
                rollout.spec = {**rollout.spec, "force": body.force}
            t.resume(session, rollout, why, now)

        return _act(rollout_id, "resume", who, apply)

    return router


def _get(ctx: AdminContext, rollout_id: int) -> dict[str, Any]:
    with ctx.read() as session:
        rollout = store.load(session, rollout_id)
        return store.render(rollout, store.model_names(session, [rollout])[rollout.model_id])


def _ids_in_phase(session, stmt, phase: str) -> list[int]:
    return [r.id for r in session.scalars(stmt) if t.phase_of(r) == phase]


def _summary(rollout: Rollout) -> dict[str, Any]:
    return {"state": t.phase_of(rollout), "step": rollout.step, "weight": rollout.weight}


def _validated(model, payload: dict[str, Any]):
    try:
        check_storable(payload, "body")  # the spec is stored as JSON and rendered on every read
        return model.model_validate(payload)
    except ValueError as exc:
        if not isinstance(exc, ValidationError):
            raise OpenAIError(422, str(exc), code=ErrorCode.INVALID_VALUE) from None
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise OpenAIError(422, f"{param}: {message}" if param else message, param=param,
                          code=ErrorCode.INVALID_VALUE) from None


def _refuse_if_budget_spent(session, slo: SloTracker, model: str) -> None:
    spent = slo.nearly_spent(session, model)
    if spent:
        raise OpenAIError(
            409, "refusing to start a rollout: " + "; ".join(b.describe() for b in spent)
            + f" (minimum {slo.min_remaining:.0%}); pass \"force\": true to start anyway",
            type="conflict_error", param="force", code=ErrorCode.ERROR_BUDGET_EXHAUSTED)


def include_rollout_routes(app: FastAPI, session_factory: sessionmaker[Session],
                           snapshot_source, slo: SloTracker | None = None) -> None:
    """Mount /admin/v1/rollouts next to the other admin routers (same error mapping)."""
    install_admin_error_handlers(app)  # idempotent: the admin app may have installed them
    ctx = AdminContext(session_factory, snapshot_source)
    app.include_router(build_rollouts_router(ctx, slo), prefix=ADMIN_PREFIX)


__all__ = ["build_rollouts_router", "include_rollout_routes"]

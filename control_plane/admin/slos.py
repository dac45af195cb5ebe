"""/admin/v1/slos and /admin/v1/models/{name}/error-budget: objectives per model (or for every
model) and how much of each error budget the gateways' traffic has left."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field, model_validator
from sqlalchemy import select

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from control_plane.admin.common import (MAX_INT, NAME_PATTERN, AdminContext, Body, Name, Page,
                                        PageDep, PathName, RowId, image, operator, paginate)
from registry.errors import NotFoundError
from registry.orm.slos import Slo
from registry.queries import get_model


class SloCreate(Body):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    model: Name | None = None  # None: the objective applies to every model
    metric: Literal["availability", "ttft", "latency"]
    objective: float = Field(gt=0, lt=1)
    threshold_ms: float | None = Field(None, gt=0, le=86_400_000)
    window_s: int = Field(30 * 24 * 3600, ge=60, le=MAX_INT)

    @model_validator(mode="after")
    def _threshold_for_latency(self) -> "SloCreate":
        if self.metric != "availability" and self.threshold_ms is None:
            raise ValueError(f"a {self.metric} SLO needs threshold_ms")
        return self


def _get_slo(session, slo_id: int) -> Slo:
    slo = session.get(Slo, slo_id)
    if slo is None:
        raise NotFoundError(f"SLO {slo_id} does not exist", param="slo_id")
    return slo


def build_router(ctx: AdminContext, slo_tracker=None) -> APIRouter:
    router = APIRouter(tags=["admin: slos"])

    @router.get("/slos")
    def list_slos(model: str | None = Query(None, max_length=200), page: Page = PageDep,
                  _: Principal = Depends(operator)):
        with ctx.read() as session:
            stmt = select(Slo).order_by(Slo.id)
            if model is not None:
                stmt = stmt.where(Slo.model_id == get_model(session, model).id)
            return paginate(session, stmt, page, image)

    @router.post("/slos", status_code=201)
    def create(body: SloCreate, who: Principal = Depends(operator)):
        with ctx.change(who, "create", "slo") as change:
            model_id = get_model(change.session, body.model).id if body.model else None
            slo = Slo(model_id=model_id, **body.model_dump(exclude={"model"}))
            change.session.add(slo)
            change.session.flush()
            change.resource_id, change.after = slo.id, image(slo)
        return change.after

    @router.delete("/slos/{slo_id}", status_code=204)
    def delete(slo_id: RowId, who: Principal = Depends(operator)):
        with ctx.change(who, "delete", "slo") as change:
            slo = _get_slo(change.session, slo_id)
            change.resource_id, change.before = slo_id, image(slo)
            change.session.delete(slo)
        return Response(status_code=204)

    @router.get("/models/{name}/error-budget")
    def error_budget(name: PathName, _: Principal = Depends(operator)):
        if slo_tracker is None:
            raise OpenAIError(503, "no SLO tracker runs in this process", code=ErrorCode.SLO_UNAVAILABLE)
        with ctx.read() as session:
            get_model(session, name)
            budgets = slo_tracker.budgets(session, name)
        return {"model": name, "data": [b.as_dict() for b in budgets]}

    return router

"""/admin/v1/models/{name}/rollouts: canary, A/B and shadow rollouts between versions.

The snapshot turns an active rollout into the model's traffic splits; actions (start, pause,
resume, advance, promote, rollback, abort) move it through its state machine."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field, field_validator
from sqlalchemy import select

from gateway.auth import Principal
from registry.errors import check_row_version
from registry.models import Rollout
from registry.queries import get_model
from registry.rollout_queries import DEFAULT_STEPS, TRANSITIONS, apply_action, create_rollout, \
    get_rollout

from .common import AdminContext, Body, Page, PageDep, actor_of, expected_row_version, image, \
    operator, paginate, with_etag

Action = Literal[tuple(TRANSITIONS)]  # type: ignore[valid-type]


class RolloutCreate(Body):
    to_version: str = Field(min_length=1)
    from_version: str | None = None
    mode: Literal["canary", "ab", "shadow"] = "canary"
    steps: list[float] = Field(default_factory=lambda: list(DEFAULT_STEPS), min_length=1,
                               max_length=50)
    step_interval_s: float = Field(300.0, gt=0)
    criteria: dict[str, float] = Field(
        default_factory=dict, description="e.g. max_error_rate, max_ttft_p95_ms")
    sticky: bool = Field(True, description="A/B: keep a user on one version")
    start: bool = False

    @field_validator("steps")
    @classmethod
    def _increasing_fractions(cls, steps: list[float]) -> list[float]:
        if any(not 0 < s <= 1 for s in steps):
            raise ValueError("every step is a traffic fraction in (0, 1]")
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError("steps must increase")
        return steps


class RolloutAction(Body):
    measurements: dict[str, Any] | None = None
    message: str = Field("", max_length=2000)


def render(rollout: Rollout, events: bool = False) -> dict[str, Any]:
    data = image(rollout, to_version=rollout.to_version.label,
                 from_version=rollout.from_version.label if rollout.from_version else None)
    if events:
        data["events"] = [image(e) for e in rollout.events]
    return data


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/models/{name}/rollouts", tags=["admin: rollouts"])

    @router.get("")
    def list_rollouts(name: str, page: Page = PageDep, _: Principal = Depends(operator)):
        with ctx.read() as session:
            model = get_model(session, name)
            stmt = select(Rollout).where(Rollout.model_id == model.id).order_by(Rollout.id.desc())
            return paginate(session, stmt, page, render)

    @router.post("", status_code=201)
    def create(name: str, body: RolloutCreate, response: Response,
               who: Principal = Depends(operator)):
        spec = body.model_dump(exclude={"to_version", "from_version", "start"})
        with ctx.change(who, "create", "rollout") as change:
            model = get_model(change.session, name)
            rollout = create_rollout(change.session, model, body.to_version,
                                     from_version=body.from_version, spec=spec,
                                     start=body.start, actor=actor_of(who))
            change.resource_id, change.after = f"{name}/{rollout.id}", render(rollout)
        with_etag(response, rollout)
        return change.after

    @router.get("/{rollout_id}")
    def get(name: str, rollout_id: int, response: Response, _: Principal = Depends(operator)):
        with ctx.read() as session:
            rollout = get_rollout(session, get_model(session, name), rollout_id)
            with_etag(response, rollout)
            return render(rollout, events=True)

    @router.post("/{rollout_id}/{action}")
    def act(name: str, rollout_id: int, action: Action, request: Request, response: Response,
            body: RolloutAction | None = None, who: Principal = Depends(operator)):
        body = body or RolloutAction()
        expected = expected_row_version(request)
        with ctx.change(who, action, "rollout") as change:
            model = get_model(change.session, name)
            rollout = get_rollout(change.session, model, rollout_id)
            check_row_version(rollout, expected, f"rollout {rollout_id}")
            change.resource_id, change.before = f"{name}/{rollout_id}", render(rollout)
            apply_action(change.session, model, rollout, action, actor_of(who),
                         body.measurements, body.message)
            change.after = render(rollout)
        with_etag(response, rollout)
        return change.after

    return router

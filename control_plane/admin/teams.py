"""/admin/v1/teams: team-wide limits and budgets (keys name their team)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field
from sqlalchemy import func, select

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from control_plane.admin.budget_status import budget_status
from control_plane.admin.common import (NAME_PATTERN, AdminContext, Body, BudgetPeriod, Count,
                                        Money, Page, PageDep, Patch, PathName, admin, delete_row,
                                        image, paginate, patch_row, with_etag)
from registry.access_queries import create_team, get_team
from registry.errors import ConflictError
from registry.orm.access import ApiKey, Team


class TeamCreate(Body):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    rpm_limit: Count | None = None
    tpm_limit: Count | None = None
    max_budget: Money | None = None
    budget_period: BudgetPeriod | None = Field(
        None, description="hour, day, week or month (UTC calendar); null: lifetime budget")


class TeamPatch(Patch):
    rpm_limit: Count | None = None
    tpm_limit: Count | None = None
    max_budget: Money | None = None
    budget_period: BudgetPeriod | None = Field(
        None, description="hour, day, week or month (UTC calendar); null: lifetime budget")


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/teams", tags=["admin: teams"])

    @router.get("")
    def list_teams(page: Page = PageDep, _: Principal = Depends(admin)):
        with ctx.read() as session:
            return paginate(session, select(Team).order_by(Team.name), page, image)

    @router.post("", status_code=201)
    def create(body: TeamCreate, response: Response, who: Principal = Depends(admin)):
        with ctx.change(who, "create", "team") as change:
            team = create_team(change.session, **body.model_dump())
            change.resource_id, change.after = team.name, image(team)
        with_etag(response, team)
        return change.after

    @router.get("/{name}")
    def get(name: PathName, response: Response, _: Principal = Depends(admin)):
        with ctx.read() as session:
            team = get_team(session, name)
            keys = session.scalar(select(func.count()).where(
                ApiKey.team == name, ApiKey.revoked_at.is_(None)))
            with_etag(response, team)
            return image(team, active_keys=keys,
                         budget=budget_status(session, team, team=team.name))

    @router.patch("/{name}")
    def update(name: PathName, body: TeamPatch, request: Request, response: Response,
               who: Principal = Depends(admin)):
        return patch_row(ctx, who, "team", name, f"team '{name}'", lambda s: get_team(s, name),
                         body, request, response)

    @router.delete("/{name}", status_code=204)
    def delete(name: PathName, request: Request, who: Principal = Depends(admin)):
        def load(session):
            team = get_team(session, name)
            keys = session.scalar(select(func.count()).where(
                ApiKey.team == name, ApiKey.revoked_at.is_(None)))
            if keys:
                raise ConflictError(f"team '{name}' has {keys} active key(s); move or revoke "
                                    "them first", param="name", code=ErrorCode.TEAM_IN_USE)
            return team

        return delete_row(ctx, who, "team", name, f"team '{name}'", load, request)

    return router

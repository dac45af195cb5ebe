"""/admin/v1/keys: API keys. The secret is returned once, by create and rotate; it is stored
only as a hash, so list and get cannot show it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field, model_validator
from sqlalchemy import select

from common.auth.principal import Principal
from common.vocabulary import Priority, Role
from control_plane.admin.budget_status import budget_status
from control_plane.admin.common import (AdminContext, Body, BudgetPeriod, Count, Money, Name, Page,
                                        PageDep, Patch, RowId, admin, image, paginate, patch_row,
                                        with_etag)
from registry.access_queries import (MIN_SECRET_LEN, check_admin_remains, check_team, create_key,
                                     get_key, revoke_key, rotate_key)
from registry.orm.access import ApiKey

Secret = Field(None, min_length=MIN_SECRET_LEN, max_length=200, pattern=r"^[\x21-\x7e]+$",
                description="import a known secret instead of generating one")
Allowlist = Field(None, max_length=1000, description="allowed models (\"<model>\" covers its "
                  "aliases and adapters; \"<model>:<alias>\" only that one); null = all")


class KeyCreate(Body):
    name: Name
    role: Role = Role.USER
    team: Name | None = Field(None, description="an existing team (POST /admin/v1/teams)")
    models: list[Name] | None = Allowlist
    rpm_limit: Count | None = None
    tpm_limit: Count | None = None
    max_budget: Money | None = None
    budget_period: BudgetPeriod | None = Field(
        None, description="hour, day, week or month (UTC calendar); null: lifetime budget")
    priority: Priority = Priority.STANDARD
    expires_at: datetime | None = None
    expires_in_s: int | None = Field(None, ge=1, le=100 * 365 * 86400)
    secret: str | None = Secret

    @model_validator(mode="after")
    def _one_expiry(self) -> KeyCreate:
        if self.expires_at is not None and self.expires_in_s is not None:
            raise ValueError("give expires_at or expires_in_s, not both")
        if self.expires_at is not None and self.expires_at.tzinfo is None:
            self.expires_at = self.expires_at.replace(tzinfo=timezone.utc)
        return self

    def expiry(self) -> datetime | None:
        if self.expires_in_s is not None:
            return datetime.now(timezone.utc) + timedelta(seconds=self.expires_in_s)
        return self.expires_at


class KeyPatch(Patch):
    name: Name = None
    role: Role = None
    team: Name | None = Field(None, description="an existing team")
    models: list[Name] | None = Allowlist
    rpm_limit: Count | None = None
    tpm_limit: Count | None = None
    max_budget: Money | None = None
    budget_period: BudgetPeriod | None = Field(
        None, description="hour, day, week or month (UTC calendar); null: lifetime budget")
    priority: Priority = None
    expires_at: datetime | None = None


class KeyRotate(Body):
    secret: str | None = Secret


def render(key: ApiKey) -> dict[str, Any]:
    return image(key, revoked=key.revoked_at is not None)


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/keys", tags=["admin: keys"])

    @router.get("")
    def list_keys(team: str | None = Query(None, max_length=200), include_revoked: bool = Query(False),
                  page: Page = PageDep, _: Principal = Depends(admin)):
        with ctx.read() as session:
            stmt = select(ApiKey).order_by(ApiKey.id)
            if team is not None:
                stmt = stmt.where(ApiKey.team == team)
            if not include_revoked:
                stmt = stmt.where(ApiKey.revoked_at.is_(None))
            return paginate(session, stmt, page, render)

    @router.post("", status_code=201)
    def create(body: KeyCreate, response: Response, who: Principal = Depends(admin)):
        fields = body.model_dump(exclude={"expires_at", "expires_in_s", "secret", "name"})
        with ctx.change(who, "create", "api_key") as change:
            check_team(change.session, body.team)
            key, secret = create_key(change.session, body.name, expires_at=body.expiry(),
                                     secret=body.secret, **fields)
            change.resource_id, change.after = key.id, render(key)
        with_etag(response, key)
        return {**change.after, "secret": secret}

    @router.get("/{key_id}")
    def get(key_id: RowId, response: Response, _: Principal = Depends(admin)):
        with ctx.read() as session:
            key = get_key(session, key_id)
            with_etag(response, key)
            return {**render(key), "budget": budget_status(session, key, key_id=key.id)}

    @router.patch("/{key_id}")
    def update(key_id: RowId, body: KeyPatch, request: Request, response: Response,
               who: Principal = Depends(admin)):
        def apply(session, key, changes):
            if "team" in changes:
                check_team(session, changes["team"])
            if changes.get("role", Role.ADMIN) != Role.ADMIN or changes.get("expires_at"):
                check_admin_remains(session, key, "demoted" if "role" in changes else "expired")
            for field, value in changes.items():
                setattr(key, field, value)

        return patch_row(ctx, who, "api_key", key_id, f"API key {key_id}",
                         lambda s: get_key(s, key_id), body, request, response, render=render,
                         apply=apply)

    @router.post("/{key_id}/revoke")
    def revoke(key_id: RowId, who: Principal = Depends(admin)):
        with ctx.change(who, "revoke", "api_key") as change:
            key = get_key(change.session, key_id)
            change.resource_id, change.before = key_id, render(key)
            check_admin_remains(change.session, key, "revoked")
            revoke_key(change.session, key_id)
            change.after = render(key)
        return change.after

    @router.post("/{key_id}/rotate")
    def rotate(key_id: RowId, body: KeyRotate | None = None, who: Principal = Depends(admin)):
        with ctx.change(who, "rotate", "api_key") as change:
            key = get_key(change.session, key_id)
            change.resource_id, change.before = key_id, render(key)
            key, secret = rotate_key(change.session, key_id, body.secret if body else None)
            change.after = render(key)
        return {**change.after, "secret": secret}

    return router

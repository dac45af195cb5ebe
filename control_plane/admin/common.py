"""Shared plumbing for the admin routers: the write transaction (audit + snapshot bump +
refresh), optimistic-concurrency headers, pagination, roles and error mapping."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from common import vocabulary
from common.auth.authenticate import require_role
from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import InferplaneError, OpenAIError, install_error_handlers
from common.vocabulary import Role
from control_plane.admin.db_errors import install_db_error_handlers
from registry.errors import check_row_version
from registry.queries import audit, bump_snapshot_version
from registry.serialize import row_to_dict

log = logging.getLogger("inferplane.admin")

ADMIN_PREFIX = "/admin/v1"
MAX_PAGE = 500
# Integer columns (ids, limits, row versions) are 32-bit on PostgreSQL: every integer the API
# accepts fits, so no value can reach the database only to be refused (or overflow) there.
MAX_INT = 2**31 - 1
MAX_NAME = 200

RowId = Annotated[int, Path(ge=1, le=MAX_INT, description="numeric id")]
PathName = Annotated[str, Path(min_length=1, max_length=MAX_NAME)]
Count = Annotated[int, Field(ge=1, le=MAX_INT)]
RowVersion = Annotated[int, Field(ge=0, le=MAX_INT)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
Money = Annotated[float, Field(ge=0, le=1e12)]

operator = require_role(Role.OPERATOR)  # admins pass too: roles nest
admin = require_role(Role.ADMIN)


class Body(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 400 naming it, not a silent no-op."""

    # NaN and Infinity (which Python's JSON parser accepts) cannot round-trip through JSON.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass
class AdminContext:
    sessions: sessionmaker[Session]
    snapshots: Any  # SnapshotSource: refresh(), publish()

    def read(self) -> Session:
        return self.sessions()

    @contextmanager
    def change(self, principal: Principal, action: str, resource_type: str) -> Iterator[Change]:
        """One registry write: the caller mutates and sets change.resource_id/before/after;
        the audit row and snapshot bump commit with it, then the snapshot is refreshed."""
        with self.sessions.begin() as session:
            change = Change(session)
            yield change
            audit(session, actor_of(principal), action, resource_type, change.resource_id,
                  before=change.before, after=change.after)
            change.snapshot_version = bump_snapshot_version(session)
        self.snapshots.refresh()
        publish = getattr(self.snapshots, "publish", None)
        if publish is not None:
            publish(change.snapshot_version)


@dataclass
class Change:
    session: Session
    resource_id: Any = ""
    before: dict | None = None
    after: dict | None = None
    snapshot_version: int = 0


def actor_of(principal: Principal) -> str:
    return f"{principal.name} (key {principal.key_id}, {principal.role})"


def image(row: Any, **extra: Any) -> dict[str, Any]:
    """The JSON form of a row, used both in responses and as an audit before/after image."""
    data = row_to_dict(row)
    data.update(extra)
    return data


def cursor_page(ctx: AdminContext, stmt: Any, id_column: Any, cursor: int | None,
                limit: int) -> dict[str, Any]:
    """One page of a newest-first list: `stmt` orders by id descending and fetches limit + 1
    rows (the extra one tells whether there is more); rows below `cursor` only.

        return cursor_page(ctx, select(AuditLog).order_by(AuditLog.id.desc())
                           .limit(limit + 1), AuditLog.id, cursor, limit)
    """
    if cursor is not None:
        stmt = stmt.where(id_column < cursor)
    with ctx.read() as session:
        rows = session.scalars(stmt).all()
    page, more = rows[:limit], len(rows) > limit
    return {"object": "list", "data": [image(r) for r in page], "has_more": more,
            "next_cursor": page[-1].id if more else None}


# --- optimistic concurrency -------------------------------------------------------------

def expected_row_version(request: Request, body_value: int | None = None) -> int | None:
    """If-Match ("3", W/"3" or 3) or the body's expected_row_version; None = unconditional."""
    header = request.headers.get("if-match")
    if header is None or header.strip() == "*":
        return body_value
    raw = header.strip().removeprefix("W/").strip('"')
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10):
        raise OpenAIError(400, f"If-Match must be a row version such as \"3\", got {header!r}",
                          param="If-Match", code=ErrorCode.INVALID_IF_MATCH)
    value = int(raw)
    if body_value is not None and body_value != value:
        raise OpenAIError(400, "If-Match and expected_row_version disagree",
                          param="expected_row_version", code=ErrorCode.INVALID_IF_MATCH)
    return value


def with_etag(response: Response, row: Any) -> None:
    response.headers["ETag"] = f'"{row.row_version}"'


# --- pagination -------------------------------------------------------------------------

@dataclass
class Page:
    limit: int
    offset: int


def page_params(limit: int = Query(100, ge=1, le=MAX_PAGE),
                offset: int = Query(0, ge=0, le=MAX_INT)) -> Page:
    return Page(limit, offset)


def paginate(session: Session, stmt, page: Page, render) -> dict[str, Any]:
    total = session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery()))
    rows = session.scalars(stmt.limit(page.limit).offset(page.offset)).all()
    return {"object": "list", "data": [render(r) for r in rows], "total": total,
            "limit": page.limit, "offset": page.offset,
            "has_more": page.offset + len(rows) < total}


PageDep = Depends(page_params)


# --- error mapping ----------------------------------------------------------------------

def install_admin_error_handlers(app: FastAPI) -> None:
    if InferplaneError not in app.exception_handlers:
        install_error_handlers(app)
    install_db_error_handlers(app)


# --- request bodies ---------------------------------------------------------------------

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # no "/" (paths) and no ":" (model:alias)
BudgetPeriod = vocabulary.BudgetPeriod  # re-exported for the admin routers


class Patch(Body):
    """PATCH bodies: only the fields sent are changed. Fields default to None without being
    Optional, so an explicit null for a required column is rejected by validation."""

    expected_row_version: RowVersion | None = None

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude={"expected_row_version"})


# --- the shared PATCH / DELETE of one row -------------------------------------------------

def _set_fields(_session: Session, row: Any, changes: dict[str, Any]) -> None:
    for field, value in changes.items():
        setattr(row, field, value)


def patch_row(ctx: AdminContext, who: Principal, kind: str, resource_id: Any, label: str,
              load, body: Patch, request: Request, response: Response, render=image,
              apply=_set_fields) -> dict[str, Any]:
    """PATCH one row: the If-Match check, `apply(session, row, changes)`, audit and ETag."""
    expected = expected_row_version(request, body.expected_row_version)
    with ctx.change(who, "update", kind) as change:
        row = load(change.session)
        check_row_version(row, expected, label)
        change.resource_id, change.before = resource_id, render(row)
        apply(change.session, row, body.changes())
        change.session.flush()
        change.after = render(row)
    with_etag(response, row)
    return change.after


def delete_row(ctx: AdminContext, who: Principal, kind: str, resource_id: Any, label: str,
               load, request: Request, render=image) -> Response:
    """DELETE one row after the If-Match check; audited with its last image."""
    expected = expected_row_version(request)
    with ctx.change(who, "delete", kind) as change:
        row = load(change.session)
        check_row_version(row, expected, label)
        change.resource_id, change.before = resource_id, render(row)
        change.session.delete(row)
    return Response(status_code=204)

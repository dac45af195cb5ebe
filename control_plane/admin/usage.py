"""/admin/v1/usage: requests, errors, tokens and spend over a time range, grouped by any of
team, key, model and day or hour (UTC).

    GET /admin/v1/usage?group_by=team,day&since=2026-11-01T00:00:00Z&until=2026-12-01T00:00:00Z

Whole days are read from the daily rollup, whole hours at the ends from the hourly one and only
the minutes left over from the per-minute buckets, so a month over millions of minute rows
reads a few hundred rows.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from control_plane.admin.common import AdminContext, operator
from registry.access_queries import ADDITIVE
from registry.orm.usage import Usage
from registry.usage_rollup import ROLLUPS, floor_to

GROUPS = ("team", "key", "model", "day", "hour")
TIME_GROUPS = ("day", "hour")  # one time bucket at most: an hour already names its day
# what parse_group_by accepts, for the schema: each field at most once, in any order
GROUP_BY = ["", *(",".join(p) for n in range(1, len(GROUPS) + 1)
                  for p in itertools.permutations(GROUPS, n)
                  if len(set(p) & set(TIME_GROUPS)) < 2)]
MAX_RANGE = timedelta(days=400)
DEFAULT_RANGE = timedelta(days=30)


class UsageRow(BaseModel):
    team: str | None = None
    key_id: int | None = None
    model: str | None = None
    day: str | None = None
    hour: str | None = None
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float
    cache_hits: int = 0   # answered by the gateway's response cache


class UsageReport(BaseModel):
    object: str = "usage_report"
    group_by: list[str]
    since: datetime
    until: datetime
    data: list[UsageRow]
    totals: UsageRow


def parse_group_by(raw: str) -> list[str]:
    fields = [f.strip() for f in raw.split(",") if f.strip()]
    bad = [f for f in fields if f not in GROUPS]
    if bad or len(set(fields)) != len(fields) or len(set(fields) & set(TIME_GROUPS)) > 1:
        raise OpenAIError(400, f"group_by takes distinct comma-separated fields from "
                          f"{', '.join(GROUPS)} (day or hour, not both); got {raw!r}",
                          param="group_by",
                          code=ErrorCode.INVALID_VALUE)
    return fields


def utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def time_range(since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    try:
        until = utc(until) if until else datetime.now(timezone.utc)
        since = utc(since) if since else until - DEFAULT_RANGE
    except OverflowError:  # year 1 or 9999 moved past the calendar by the offset or range
        raise OpenAIError(422, "since/until lie at the edge of the calendar (give both, "
                          "within years 1-9999 in UTC)", param="until",
                          code=ErrorCode.INVALID_VALUE) from None
    if since >= until:
        raise OpenAIError(422, "since must be before until", param="since", code=ErrorCode.INVALID_VALUE)
    if until - since > MAX_RANGE:
        raise OpenAIError(422, f"the range may span at most {MAX_RANGE.days} days",
                          param="since", code=ErrorCode.INVALID_VALUE)
    return since, until


def _hour(column, dialect: str):
    if dialect == "sqlite":
        return func.substr(column, 1, 13).op("||")(":00")
    return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD HH24:00")  # the UTC hour


def _day(column, dialect: str):
    if dialect == "sqlite":
        return func.substr(column, 1, 10)  # SQLite stores "YYYY-MM-DD HH:MM:SS.ffffff"
    return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")  # the UTC day


def _grouped(session: Session, table, ts, where, groups: list[str]) -> list[tuple]:
    dialect = session.get_bind().dialect.name
    columns = {"team": table.team, "key": table.key_id, "model": table.model,
               "day": _day(ts, dialect), "hour": _hour(ts, dialect)}
    keys = [columns[g].label(g) for g in groups]
    sums = [func.coalesce(func.sum(getattr(table, f)), 0) for f in ADDITIVE]
    stmt = select(*keys, *sums).where(where)
    if keys:
        stmt = stmt.group_by(*keys)
    return session.execute(stmt).all()


def usage_report(session: Session, since: datetime, until: datetime, groups: list[str],
                 filters: dict[str, Any]) -> dict[str, Any]:
    """Sums per group over [since, until): whole days from the daily rollup, whole hours at
    the ends from the hourly one, the minutes left over from the per-minute buckets."""
    levels = ROLLUPS[1:] if "hour" in groups else ROLLUPS  # days cannot be split into hours
    return _merge(_cover(session, since, until, groups, filters, levels), groups, since, until)


def _cover(session: Session, since: datetime, until: datetime, groups: list[str],
           filters: dict[str, Any], levels) -> list[tuple]:
    if since >= until:
        return []
    if not levels:
        where = and_(Usage.bucket_start >= since, Usage.bucket_start < until,
                     *_filters(Usage, filters))
        return _grouped(session, Usage, Usage.bucket_start, where, groups)
    (table, width), finer = levels[0], levels[1:]
    first = floor_to(since, width)
    first = first if first == since else first + width
    last = floor_to(until, width)
    if first >= last:  # no whole unit inside: all of it from finer tables
        return _cover(session, since, until, groups, filters, finer)
    where = and_(table.start >= first, table.start < last, *_filters(table, filters))
    # Each end on its own: one index range scan apiece (an OR of the two would scan it all).
    return (_grouped(session, table, table.start, where, groups)
            + _cover(session, since, first, groups, filters, finer)
            + _cover(session, last, until, groups, filters, finer))


def _filters(table, filters: dict[str, Any]) -> list:
    columns = {"team": table.team, "key_id": table.key_id, "model": table.model}
    return [columns[name] == value for name, value in filters.items() if value is not None]


def _merge(parts: list[tuple], groups: list[str], since, until) -> dict[str, Any]:
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0] * len(ADDITIVE))
    for row in parts:
        acc = sums[tuple(row[:len(groups)])]
        for i, value in enumerate(row[len(groups):]):
            acc[i] += value or 0
    names = ["key_id" if g == "key" else g for g in groups]
    data = [{**dict(zip(names, key)), **_values(acc)} for key, acc in sorted(
        sums.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0]))]
    totals = [sum(acc[i] for acc in sums.values()) for i in range(len(ADDITIVE))]
    return {"object": "usage_report", "group_by": groups, "since": since, "until": until,
            "data": data, "totals": _values(totals)}


def _values(acc: list[float]) -> dict[str, Any]:
    out = {f: int(v) for f, v in zip(ADDITIVE, acc)}
    out["cost"] = round(float(acc[ADDITIVE.index("cost")]), 10)
    return out


def build_router(ctx: AdminContext) -> APIRouter:
    router = APIRouter(prefix="/usage", tags=["admin: usage"])

    @router.get("", response_model=UsageReport, response_model_exclude_unset=True,
                responses={400: {"description": "bad group_by"},
                           403: {"description": "needs the operator role"},
                           422: {"description": "since is not before until, or the range is "
                                               "too long"}})
    def get_usage(
        group_by: Annotated[str, Query(max_length=100, json_schema_extra={"enum": GROUP_BY},
                                       description="comma-separated: team, key, model, and "
                                       "day or hour (UTC); empty = totals only")] = "",
        since: Annotated[datetime | None, Query(description="start (inclusive, ISO 8601); "
                                                 "default: 30 days before until")] = None,
        until: Annotated[datetime | None, Query(description="end (exclusive); default: now")]
        = None,
        team: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        key_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
        model: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        _: Principal = Depends(operator),
    ):
        groups = parse_group_by(group_by)
        start, end = time_range(since, until)
        with ctx.read() as session:
            return usage_report(session, start, end, groups,
                                {"team": team, "key_id": key_id, "model": model})

    return router

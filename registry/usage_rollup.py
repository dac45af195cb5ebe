"""Usage rollups: the per-minute `usage` buckets summed per hour and per UTC day for each
(key, team, model), kept in step by the usage sink, so a month of usage reads ~30 daily rows
per key and model (plus a few hourly and minute rows at the ragged ends) instead of ~43,000.
The tables are registry.orm.usage's `UsageHourly` and `UsageDaily`.

    add_to_rollups(session, records)   # the same per-minute batch the sink gives record_usage
    rebuild_rollups(session)           # recompute both from `usage` (backfill, benchmarks)
    ROLLUPS                            # (table, width), coarsest first, for range queries
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from registry.access_queries import ADDITIVE, UsageRecord
from registry.orm.usage import Usage, UsageDaily, UsageHourly

HOUR, DAY = timedelta(hours=1), timedelta(days=1)
ROLLUPS = ((UsageDaily, DAY), (UsageHourly, HOUR))
_UNIT = {HOUR: "hour", DAY: "day"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def floor_to(ts: datetime, width: timedelta) -> datetime:
    """The start of the UTC hour or day holding `ts` (naive datetimes are taken as UTC)."""
    ts = ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    return ts - (ts - _EPOCH) % width


def add_to_rollups(session: Session, records: Iterable[UsageRecord]) -> None:
    """Add a batch of per-minute records into their hourly and daily rows."""
    records = list(records)
    for table, width in ROLLUPS:
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0] * len(ADDITIVE))
        for rec in records:
            acc = sums[(floor_to(rec.bucket_start, width), rec.key_id, rec.team, rec.model)]
            for i, field in enumerate(ADDITIVE):
                acc[i] += getattr(rec, field)
        # one lock order for every writer (rows are locked FOR UPDATE): no deadlocks
        for (start, key_id, team, model), acc in sorted(
                sums.items(), key=lambda i: (i[0][0], i[0][1] or 0, i[0][2] or "", i[0][3])):
            row = session.scalar(select(table).where(
                table.start == start, table.model == model,
                _is(table.key_id, key_id), _is(table.team, team)).with_for_update())
            if row is None:
                row = table(start=start, key_id=key_id, team=team, model=model,
                            **{f: 0 for f in ADDITIVE})
                session.add(row)
            for i, field in enumerate(ADDITIVE):
                setattr(row, field, getattr(row, field) + acc[i])
    session.flush()


def _is(column, value):
    # NULL never equals NULL in SQL: JWT principals have no key, some keys no team.
    return column.is_(None) if value is None else column == value


def trunc_expr(column, width: timedelta, dialect: str):
    """SQL for the UTC hour or day of a timestamp column, as each database stores datetimes."""
    if dialect == "sqlite":  # stored as "YYYY-MM-DD HH:MM:SS.ffffff"
        fmt = "%Y-%m-%d %H:00:00.000000" if width == HOUR else "%Y-%m-%d 00:00:00.000000"
        return func.strftime(fmt, column)
    # In UTC whatever the session's time zone (some zones are offset by half hours).
    return func.timezone("UTC", func.date_trunc(_UNIT[width], func.timezone("UTC", column)))


def rebuild_rollups(session: Session) -> dict[str, int]:
    """Replace both rollups with sums over `usage`; returns the row count of each."""
    dialect = session.get_bind().dialect.name
    counts = {}
    for table, width in ROLLUPS:
        start = trunc_expr(Usage.bucket_start, width, dialect).label("start")
        sums = [func.sum(getattr(Usage, f)).label(f) for f in ADDITIVE]
        source = select(start, Usage.key_id, Usage.team, Usage.model, *sums).group_by(
            start, Usage.key_id, Usage.team, Usage.model)
        session.execute(delete(table))
        session.execute(insert(table).from_select(
            ["start", "key_id", "team", "model", *ADDITIVE], source))
        counts[table.__tablename__] = session.scalar(select(func.count()).select_from(table))
    return counts


__all__ = ["ROLLUPS", "add_to_rollups", "floor_to", "rebuild_rollups", "trunc_expr"]

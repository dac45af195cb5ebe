"""How fast /admin/v1/usage answers a 30-day group-by over a million per-minute usage rows.

    inferplane bench usage_query [--rows 1000000] [--db sqlite|postgresql|both]
                                 [--pg-dsn postgresql://postgres@127.0.0.1:5432/test]

Fills a fresh, migrated database (a temporary SQLite file; a throw-away PostgreSQL database,
dropped afterwards) with `rows` minute buckets spread over 30 days (keys × teams × models),
builds the hourly and daily rollups as the usage sink keeps them, then times the endpoint's query
(`usage_report`, best and median of 7) grouped by team, key, model and day over a ragged
30-day range (the ends come from minute buckets). Baseline, measured in the same run: the same
group-by straight over the minute table, which is what the query would cost without the
rollup. Goal: under 200 ms on SQLite.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import func, insert, select  # noqa: E402

from control_plane.admin.usage import _grouped, usage_report  # noqa: E402
from registry import queries as q  # noqa: E402
from registry.db import make_session_factory  # noqa: E402
from registry.migrate import upgrade  # noqa: E402
from registry.orm.usage import Usage  # noqa: E402
from registry.usage_rollup import rebuild_rollups  # noqa: E402

GROUPS = (["team"], ["key"], ["model"], ["day"], ["team", "model", "day"])
KEYS, MODELS = 6, 4
SPAN = timedelta(days=30)
END = datetime(2026, 11, 30, tzinfo=timezone.utc)


def fill(sessions, rows: int) -> None:
    with sessions.begin() as s:
        keys = [q.create_key(s, f"k{i}", team=f"team{i % 4}")[0].id for i in range(KEYS)]
    combos = [(k, f"team{i % 4}", f"model{m}") for i, k in enumerate(keys) for m in range(MODELS)]
    buckets = rows // len(combos)
    if buckets > SPAN / timedelta(minutes=1):
        raise SystemExit(f"at most {int(SPAN / timedelta(minutes=1)) * len(combos):,} rows fit "
                         f"30 days of minute buckets for {len(combos)} keys × models")
    step = SPAN / timedelta(minutes=1) / buckets  # minutes between buckets: rows span 30 days
    batch: list[dict] = []
    with sessions.begin() as s:
        for n in range(buckets):
            bucket = END - SPAN + timedelta(minutes=int(n * step))
            for key_id, team, model in combos:
                batch.append({"bucket_start": bucket, "key_id": key_id, "team": team,
                              "model": model, "requests": 3, "errors": n % 7 == 0,
                              "prompt_tokens": 300, "completion_tokens": 120,
                              "cached_tokens": 0, "cost": 0.0021})
            if len(batch) >= 50_000:
                s.execute(insert(Usage), batch)
                batch.clear()
        if batch:
            s.execute(insert(Usage), batch)
        rollups = rebuild_rollups(s)
    with sessions() as s:
        print(f"  {s.scalar(select(func.count()).select_from(Usage)):,} minute rows, "
              + ", ".join(f"{n:,} {table}" for table, n in rollups.items()))


def timed(fn, repeats: int = 7) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return min(times), statistics.median(times)


def run(url: str, rows: int) -> float:
    upgrade(url, progress=None)
    sessions = make_session_factory(url)
    started = time.perf_counter()
    fill(sessions, rows)
    print(f"  filled in {time.perf_counter() - started:.1f} s")
    since, until = END - timedelta(days=30, minutes=17), END - timedelta(minutes=3)
    worst = 0.0
    for groups in GROUPS:
        with sessions() as s:
            best, median = timed(lambda: usage_report(s, since, until, list(groups), {}))
            where = (Usage.bucket_start >= since) & (Usage.bucket_start < until)
            base_best, _ = timed(lambda: _grouped(s, Usage, Usage.bucket_start, where,
                                                  list(groups)), repeats=3)
        worst = max(worst, median)
        print(f"  group_by={','.join(groups):<16} best {best:7.1f} ms  median {median:7.1f} ms"
              f"   minute-table baseline {base_best:8.1f} ms  ({base_best / best:5.1f}x)")
    sessions.kw["bind"].dispose()
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--pg-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    worst = {}
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            print(f"SQLite, {args.rows:,} rows over 30 days")
            worst["sqlite"] = run(f"sqlite:///{tmp}/usage.db", args.rows)
    if args.db in ("postgresql", "both"):
        import psycopg
        name = f"ip_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            print(f"PostgreSQL, {args.rows:,} rows over 30 days")
            base = args.pg_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
            worst["postgresql"] = run(f"{base}/{name}", args.rows)
        finally:
            with psycopg.connect(args.pg_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for db, ms in worst.items():
        print(f"{db}: slowest median {ms:.1f} ms (goal < 200 ms): {'ok' if ms < 200 else 'SLOW'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

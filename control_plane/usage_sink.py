"""Usage from the gateway into SQL: per-minute buckets per key and model (and their hourly and
daily rollups), spend charged, and one request-log row per request (kept for a retention period)."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from sqlalchemy.orm import sessionmaker

from common.usage_record import UsageRecord as GatewayUsage
from common.usage_collector import SpoolCollector
from common.usage_writer import UsageWriter
from registry.access_queries import UsageRecord, record_usage
from control_plane.body_log_sink import BODY_RETENTION_S, body_rows
from registry.guardrails import append_bodies, prune_bodies
from registry.request_log import append_requests, logged_requests, prune_requests
from registry.usage_rollup import add_to_rollups

BUCKET_S = 60
REQUEST_RETENTION_S = 7 * 24 * 3600  # request-log rows older than this are pruned
PRUNE_EVERY_S = 60.0   # the request log is pruned at most this often, not with every batch
# Records per write: under load a batch is written when this many wait (else every 500 ms), so
# the per-transaction work (bucket and rollup upserts, the prune) is paid per ~1,000 requests.
MAX_BATCH = 1000
COLLECT_INTERVAL_MS = 1000   # how often `up --workers N` writes its workers' usage


def _bucket(ts: float) -> int:
    """The start of the minute holding `ts`, in whole seconds (a datetime once per bucket)."""
    return int(ts - ts % BUCKET_S)


def _key_id(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None  # JWT principals have no key row


def _lock_order(item) -> tuple:
    # Every writer locks (SELECT ... FOR UPDATE) its bucket rows in this one order, so two
    # gateway processes adding to the same minute wait for each other instead of deadlocking.
    (bucket, key_id, team, model), _ = item
    return bucket, key_id or 0, team or "", model


def aggregate(records: list[GatewayUsage]) -> list[UsageRecord]:
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0, 0])
    for rec in records:
        key = (_bucket(rec.created_at), _key_id(rec.key_id), rec.team, rec.model)
        acc = sums[key]
        acc[0] += 1
        acc[1] += rec.status != "ok"
        acc[2] += rec.prompt_tokens
        acc[3] += rec.completion_tokens
        acc[4] += rec.cost_usd
        acc[5] += rec.cache == "hit"
    return [UsageRecord(bucket_start=datetime.fromtimestamp(b, tz=timezone.utc), key_id=k,
                        team=t, model=m, requests=int(a[0]), errors=int(a[1]),
                        prompt_tokens=int(a[2]), completion_tokens=int(a[3]), cost=a[4],
                        cache_hits=int(a[5]))
            for (b, k, t, m), a in sorted(sums.items(), key=_lock_order)]


def request_rows(records: list[GatewayUsage]) -> list[tuple]:
    """The request-log rows of a batch (metadata only), in REQUEST_COLUMNS order."""
    return [(datetime.fromtimestamp(r.created_at, tz=timezone.utc), r.request_id[:64],
             r.trace_id, _key_id(r.key_id), r.team, r.model, r.version,
             None if r.backend is None else str(r.backend)[:100], r.status, r.http_status,
             r.stream, r.prompt_tokens, r.completion_tokens, r.cost_usd, r.latency_ms,
             r.ttft_ms, r.cache)
            for r in records]


def sql_usage_sink(sessions: sessionmaker, request_retention_s: float = REQUEST_RETENTION_S,
                   clock: Callable[[], float] = time.monotonic,
                   body_retention_s: float = BODY_RETENTION_S) -> Callable[[list, bool], None]:
    """`write(batch, replayed)`: one transaction adding a batch to the buckets, rollups and the
    request log (`replayed`: records that may be there already, only the missing ones go)."""
    pruned_at: float | None = None

    def write(batch: list[GatewayUsage], replayed: bool) -> None:
        nonlocal pruned_at
        now = clock()
        prune = pruned_at is None or now - pruned_at >= PRUNE_EVERY_S
        with sessions.begin() as session:
            if replayed:
                batch = not_yet_logged(session, batch)
            buckets = aggregate(batch)
            record_usage(session, buckets)
            add_to_rollups(session, buckets)
            append_requests(session, request_rows(batch))
            append_bodies(session, body_rows(batch))
            if prune:
                prune_requests(session, datetime.now(timezone.utc)
                               - timedelta(seconds=request_retention_s))
                prune_bodies(session, datetime.now(timezone.utc)
                             - timedelta(seconds=body_retention_s))
        if prune:   # only once the transaction holding it committed
            pruned_at = now

    return write


def sql_usage_writer(sessions: sessionmaker, spool=None, **sink_options) -> UsageWriter:
    """A gateway process writing its own usage; `spool`: a common.usage_spool.UsageSpool
    keeping records on disk until written."""
    write = sql_usage_sink(sessions, **sink_options)
    return UsageWriter(lambda batch: write(batch, False), max_batch=MAX_BATCH, spool=spool,
                       replay_sink=lambda batch: write(batch, True))


def sql_usage_collector(sessions: sessionmaker, spool, **sink_options) -> SpoolCollector:
    """The control plane of `up --workers N` writing what its workers hand off, every second:
    a batch costs ~3.5 ms of CPU before its first record (bucket and rollup upserts), so four
    workers' half-second segments go in one transaction rather than four."""
    return SpoolCollector(spool, sql_usage_sink(sessions, **sink_options),
                          interval_ms=COLLECT_INTERVAL_MS, max_batch=MAX_BATCH)


def not_yet_logged(session, records: list[GatewayUsage]) -> list[GatewayUsage]:
    """The records of a dead process whose request-log row is not there yet: the process may
    have died after its transaction committed and before it released the spool segment, and
    writing those again would count their requests and spend twice."""
    if not records:
        return records
    when = [datetime.fromtimestamp(r.created_at, tz=timezone.utc) for r in records]
    logged = logged_requests(session, list({r.request_id[:64] for r in records}),
                             min(when), max(when))
    return [r for r, at in zip(records, when) if (r.request_id[:64], at) not in logged]

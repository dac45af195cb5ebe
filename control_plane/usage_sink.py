"""Usage from the gateway into SQL: per-minute buckets per key and model, spend charged."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone

from sqlalchemy.orm import sessionmaker

from gateway.usage import UsageWriter
from gateway.usage_record import UsageRecord as GatewayUsage
from registry.access_queries import UsageRecord, record_usage

BUCKET_S = 60


def _bucket(ts: float) -> datetime:
    return datetime.fromtimestamp(ts - ts % BUCKET_S, tz=timezone.utc)


def _key_id(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None  # JWT principals have no key row


def aggregate(records: list[GatewayUsage]) -> list[UsageRecord]:
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
    for rec in records:
        key = (_bucket(rec.created_at), _key_id(rec.key_id), rec.team, rec.model)
        acc = sums[key]
        acc[0] += 1
        acc[1] += rec.status != "ok"
        acc[2] += rec.prompt_tokens
        acc[3] += rec.completion_tokens
        acc[4] += rec.cost_usd
    return [UsageRecord(bucket_start=b, key_id=k, team=t, model=m, requests=int(a[0]),
                        errors=int(a[1]), prompt_tokens=int(a[2]), completion_tokens=int(a[3]),
                        cost=a[4]) for (b, k, t, m), a in sums.items()]


def sql_usage_writer(sessions: sessionmaker) -> UsageWriter:
    def sink(batch: list[GatewayUsage]) -> None:
        with sessions.begin() as session:
            record_usage(session, aggregate(batch))
    return UsageWriter(sink)

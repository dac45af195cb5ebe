"""Body-log rows from the gateway's usage records: written in the usage sink's batches (never
one write per request) and pruned past the retention with the request log.

    append_bodies(session, body_rows(batch))       # in the usage sink's transaction
    prune_bodies(session, older_than=dt)            # registry.guardrails
"""
from __future__ import annotations

from datetime import datetime, timezone

from common.usage_record import UsageRecord

BODY_RETENTION_S = 7 * 24 * 3600   # guardrails.body_retention_days: 7


def body_rows(records: list[UsageRecord]) -> list[dict]:
    """The request_bodies rows of a batch: one per record whose policy logs bodies."""
    rows = []
    for r in records:
        b = r.bodies
        if b is None:
            continue
        rows.append({
            "created_at": datetime.fromtimestamp(r.created_at, tz=timezone.utc),
            "request_id": r.request_id[:64],
            "key_id": int(r.key_id) if r.key_id and r.key_id.isdigit() else None,
            "model": r.model, "policy": b.policy, "mode": b.mode,
            "request_body": b.request_body, "response_body": b.response_body,
            "request_chars": b.request_chars, "response_chars": b.response_chars,
            "request_truncated": b.request_truncated,
            "response_truncated": b.response_truncated,
            "findings": list(b.findings) or None})
    return rows


__all__ = ["BODY_RETENTION_S", "body_rows"]

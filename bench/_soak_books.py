"""The soak's books: what the gateway counted against what its usage writers put in the
database (see bench/soak.py).

    counters = read_counters(metrics_text)              # before `up` stops
    before = read_database(url, id_prefix)              # before `up` starts (an existing db)
    after = read_database(url, id_prefix)               # after `up` stopped: writers flushed
    books = balance(counters, after.minus(before), answered_ids, cut_ids)

Four figures for the soak model: the gateway's request counter (sum of
inferplane_requests_total), the request-log rows, the usage table's sum(requests), and spend
(inferplane_spend_usd_total against the usage table's sum(cost)). The gateway counts a
request and emits its usage record in the same step (gateway/request_path/accounting.py), so
after a clean stop the three request counts are equal and the two spends agree to rounding.
Every request the client saw answered (a status code, or an error inside its stream) carries
the soak's own x-request-id, so each one is looked up in the request log by id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from _soak_procs import MODEL, metric_samples

SPEND_TOLERANCE = 1e-6   # relative


@dataclass
class Counters:
    requests: float
    spend_usd: float


@dataclass
class DatabaseBooks:
    log_rows: int = 0
    log_spend_usd: float = 0.0
    usage_requests: int = 0
    usage_spend_usd: float = 0.0
    log_ids: set[str] = field(default_factory=set)

    def minus(self, before: "DatabaseBooks") -> "DatabaseBooks":
        """What this run added to a database that already held rows for the model."""
        return DatabaseBooks(self.log_rows - before.log_rows,
                             self.log_spend_usd - before.log_spend_usd,
                             self.usage_requests - before.usage_requests,
                             self.usage_spend_usd - before.usage_spend_usd,
                             self.log_ids - before.log_ids)


def read_counters(metrics_text: str) -> Counters:
    return Counters(sum(metric_samples(metrics_text, "inferplane_requests_total", MODEL)),
                    sum(metric_samples(metrics_text, "inferplane_spend_usd_total", MODEL)))


def read_database(url: str, id_prefix: str) -> DatabaseBooks:
    """The model's request-log rows (ids starting with `id_prefix`: this run's) and usage
    sums; all zero where `up` has not created the tables yet."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    try:
        if not {"request_log", "usage"} <= set(inspect(engine).get_table_names()):
            return DatabaseBooks()
        with engine.connect() as conn:
            logged = conn.execute(text(
                "SELECT request_id, cost FROM request_log WHERE model = :m"),
                {"m": MODEL}).all()
            requests, cost = conn.execute(text(
                "SELECT coalesce(sum(requests), 0), coalesce(sum(cost), 0) FROM usage "
                "WHERE model = :m"), {"m": MODEL}).one()
    finally:
        engine.dispose()
    ours = [(rid, c) for rid, c in logged if rid.startswith(id_prefix)]
    return DatabaseBooks(len(ours), float(sum(c for _, c in ours)), int(requests), float(cost),
                         {rid for rid, _ in ours})


def _spend_agrees(a: float, b: float) -> bool:
    return abs(a - b) <= SPEND_TOLERANCE * max(abs(a), abs(b), 1e-12)


def balance(counters: Counters, db: DatabaseBooks, answered: set[str], cut: set[str]) -> dict:
    """The books side by side and the two goals: `books_balance` (equal request counts,
    spend within SPEND_TOLERANCE) and `answered_requests_logged` (every answered id in the
    log). `cut`: ids whose connection a killed worker took down before an answer; expected
    nowhere, reported."""
    missing = sorted(answered - db.log_ids)
    counts = {round(counters.requests), db.log_rows, db.usage_requests}
    return {
        "counter_requests": counters.requests, "log_rows": db.log_rows,
        "usage_requests": db.usage_requests, "counter_spend_usd": counters.spend_usd,
        "usage_spend_usd": db.usage_spend_usd, "log_spend_usd": db.log_spend_usd,
        "log_duplicates": db.log_rows - len(db.log_ids),
        "answered": len(answered), "answered_missing_from_log": len(missing),
        "missing_ids": missing[:50], "cut_by_worker_kill": len(cut),
        "cut_found_in_log": len(cut & db.log_ids),
        "checks": {"books_balance": len(counts) == 1
                   and _spend_agrees(counters.spend_usd, db.usage_spend_usd),
                   "answered_requests_logged": not missing},
    }


__all__ = ["Counters", "DatabaseBooks", "balance", "read_counters", "read_database"]

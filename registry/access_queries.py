"""Access-control queries: teams, API keys (create / revoke / rotate) and usage batches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from common.auth.keys import KEY_PREFIX, display_prefix, generate_key, hash_key
from common.error_codes import ErrorCode
from common.vocabulary import Priority, Role
from registry.errors import ConflictError, InvalidError, NotFoundError
from registry.named import create_named, get_named
from registry.orm.access import ApiKey, Team
from registry.orm.base import utcnow
from registry.orm.usage import Usage

MIN_SECRET_LEN = 20  # imported secrets shorter than this are guessable


def get_team(session: Session, name: str) -> Team:
    return get_named(session, Team, name, "team")


def create_team(session: Session, name: str, **fields: Any) -> Team:
    return create_named(session, Team, name, "team", **fields)


def check_team(session: Session, team: str | None) -> None:
    """A key's team names a row in `teams` (its limits and budget apply to the key)."""
    if team is not None and session.scalar(select(Team.id).where(Team.name == team)) is None:
        raise NotFoundError(f"team '{team}' does not exist; create it with POST "
                            "/admin/v1/teams first", param="team", code=ErrorCode.TEAM_NOT_FOUND)


def _active_admins(now: datetime):
    return select(ApiKey.id).where(ApiKey.role == Role.ADMIN, ApiKey.revoked_at.is_(None),
                                   or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now))


def check_admin_remains(session: Session, key: ApiKey, change: str) -> None:
    """Refuse to revoke, demote or expire the last active admin key: nobody could manage keys
    afterwards (409). On PostgreSQL the admin rows are locked first, so two concurrent requests
    cannot each remove "the other" last admin."""
    now = utcnow()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_active_admins(now).with_for_update())
    active = set(session.scalars(_active_admins(now)))
    if key.id in active and len(active) == 1:
        raise ConflictError(f"API key {key.id} is the last active admin key and cannot be "
                            f"{change}; create another admin key first", param="key_id",
                            code=ErrorCode.LAST_ADMIN)


def get_key(session: Session, key_id: int) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFoundError(f"API key {key_id} does not exist", param="key_id")
    return key


def _checked_secret(session: Session, secret: str | None) -> str:
    if secret is None:
        return generate_key()
    if len(secret) < MIN_SECRET_LEN:
        raise InvalidError(f"an imported secret needs at least {MIN_SECRET_LEN} characters",
                           param="secret")
    if session.scalar(select(ApiKey.id).where(ApiKey.key_hash == hash_key(secret))) is not None:
        raise ConflictError("that secret is already in use by another key", param="secret",
                            code=ErrorCode.ALREADY_EXISTS)
    return secret


def create_key(session: Session, name: str, *, role: str = Role.USER, team: str | None = None,
               models: list[str] | None = None, rpm_limit: int | None = None,
               tpm_limit: int | None = None, max_budget: float | None = None,
               budget_period: str | None = None, priority: str = Priority.STANDARD, expires_at: datetime | None = None,
               secret: str | None = None) -> tuple[ApiKey, str]:
    """Returns (row, secret). The secret is shown to the caller once and never stored.

    `secret` imports a known value (bootstrap keys from config or the environment). `team` is
    a label; a row in `teams` with that name adds team-wide limits and budget."""
    secret = _checked_secret(session, secret)
    key = ApiKey(key_hash=hash_key(secret), prefix=display_prefix(secret), name=name,
                 team=team, role=role, models=models, rpm_limit=rpm_limit, tpm_limit=tpm_limit,
                 max_budget=max_budget, budget_period=budget_period, priority=priority,
                 expires_at=expires_at)
    session.add(key)
    session.flush()
    return key, secret


def revoke_key(session: Session, key_id: int) -> ApiKey:
    key = get_key(session, key_id)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key


def rotate_key(session: Session, key_id: int, secret: str | None = None) -> tuple[ApiKey, str]:
    """Replace the secret of a live key; the old secret stops working with the next snapshot."""
    key = get_key(session, key_id)
    if key.revoked_at is not None:
        raise ConflictError(f"API key {key_id} is revoked; create a new key instead",
                            code=ErrorCode.KEY_REVOKED)
    secret = _checked_secret(session, secret)
    key.key_hash = hash_key(secret)
    key.prefix = display_prefix(secret)
    session.flush()
    return key, secret


@dataclass(frozen=True)
class UsageRecord:
    bucket_start: datetime
    key_id: int | None
    team: str | None
    model: str
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    cache_hits: int = 0


ADDITIVE = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost",
            "cache_hits")


def record_usage(session: Session, records: Iterable[UsageRecord]) -> int:
    """Add a batch into its per-bucket rows and charge key and team spend. Returns row count."""
    count = 0
    for rec in records:
        row = session.scalar(select(Usage).where(
            Usage.bucket_start == rec.bucket_start, Usage.key_id == rec.key_id,
            Usage.model == rec.model).with_for_update())
        if row is None:
            row = Usage(bucket_start=rec.bucket_start, key_id=rec.key_id, team=rec.team,
                        model=rec.model, **{f: 0 for f in ADDITIVE})
            session.add(row)
        for field in ADDITIVE:
            setattr(row, field, getattr(row, field) + getattr(rec, field))
        _charge(session, rec)
        count += 1
    session.flush()
    return count


def spend_since(session: Session, since: datetime, *, key_id: int | None = None,
                team: str | None = None) -> float:
    """USD recorded in usage buckets from `since` on, for one key or one team."""
    query = select(func.coalesce(func.sum(Usage.cost), 0.0)).where(Usage.bucket_start >= since)
    query = query.where(Usage.key_id == key_id) if key_id is not None else \
        query.where(Usage.team == team)
    return float(session.scalar(query))


def _charge(session: Session, rec: UsageRecord) -> None:
    # SQL-side increments: spend is also charged by other gateway replicas concurrently.
    if not rec.cost:
        return
    if rec.key_id is not None:
        session.execute(update(ApiKey).where(ApiKey.id == rec.key_id)
                        .values(spend=ApiKey.spend + rec.cost)
                        .execution_options(synchronize_session=False))
    if rec.team is not None:
        session.execute(update(Team).where(Team.name == rec.team)
                        .values(spend=Team.spend + rec.cost)
                        .execution_options(synchronize_session=False))


__all__ = ["KEY_PREFIX", "UsageRecord", "check_admin_remains", "check_team", "create_key", "create_team", "get_key", "get_team",
           "record_usage", "revoke_key", "rotate_key", "spend_since"]

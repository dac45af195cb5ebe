"""Who is calling: API keys (hashed, looked up in the snapshot) or JWTs, as a `Principal`.

`authenticate` and `require_role` are FastAPI dependencies; the control plane's admin routers
import them. Roles nest: admin ⊇ operator ⊇ user. Secrets never reach a log line.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated

from fastapi import Depends, Request

from common.auth.jwt_verifier import looks_like_jwt
from common.auth.keys import hash_key
from common.auth.principal import ROLE_RANK, Principal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.tracing import child_span
from common.vocabulary import Priority, Role


def _allowlist(models) -> tuple[str, ...] | None:
    if not models or "*" in models:
        return None
    if isinstance(models, str):
        return tuple(m.strip() for m in models.split(",") if m.strip())
    return tuple(models)


def _expired(expires_at) -> bool:
    if expires_at is None:
        return False
    if isinstance(expires_at, datetime):
        if expires_at.tzinfo is None:  # stored as naive UTC
            expires_at = expires_at.replace(tzinfo=timezone.utc)
        return expires_at <= datetime.now(timezone.utc)
    return float(expires_at) <= time.time()


# key hash -> (the snapshot's key view, its principal): a key's principal is made again only
# when a new snapshot brings a new view of it (its spend, limits or models changed)
_PRINCIPALS: dict[str, tuple[object, Principal]] = {}
PRINCIPALS_KEPT = 10_000   # past it the cache starts over


def principal_from_key(snapshot, secret: str) -> Principal:
    hashed = hash_key(secret)
    key = snapshot.keys.get(hashed)
    if key is None:
        raise OpenAIError(401, "invalid API key", code=ErrorCode.INVALID_API_KEY)
    if key.revoked:
        raise OpenAIError(401, "API key has been revoked", code=ErrorCode.INVALID_API_KEY)
    if _expired(key.expires_at):
        raise OpenAIError(401, "API key has expired", code=ErrorCode.INVALID_API_KEY)
    known = _PRINCIPALS.get(hashed)
    if known is not None and known[0] is key:
        return known[1]
    if len(_PRINCIPALS) >= PRINCIPALS_KEPT:
        _PRINCIPALS.clear()
    principal = principal_of_key(key)
    _PRINCIPALS[hashed] = (key, principal)
    return principal


def principal_of_key(key) -> Principal:
    """The principal of a snapshot key (registry.snapshot.KeyView), whatever its state."""
    return Principal(key_id=str(key.key_id), name=key.name, team=key.team,
                     role=key.role or Role.USER,
                     models=_allowlist(key.models), priority=key.priority or Priority.STANDARD,
                     rpm_limit=key.rpm_limit, tpm_limit=key.tpm_limit,
                     max_budget=key.max_budget, budget_period=key.budget_period,
                     spend=key.spend)


def principal_from_claims(claims: dict, settings) -> Principal:
    role = str(claims.get(settings.jwt.role_claim) or Role.USER)
    if role not in ROLE_RANK:
        raise OpenAIError(403, f"token role {role!r} is not a known role", code=ErrorCode.INVALID_ROLE)
    subject = str(claims.get("sub") or "anonymous")
    return Principal(key_id=f"jwt:{subject}", name=subject, team=claims.get(settings.jwt.team_claim),
                     role=role, models=_allowlist(claims.get(settings.jwt.models_claim)),
                     priority=str(claims.get("priority") or Priority.STANDARD),
                     rpm_limit=settings.limits.rpm, tpm_limit=settings.limits.tpm)


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise OpenAIError(401, "missing API key: send 'Authorization: Bearer <key>'",
                          code=ErrorCode.MISSING_API_KEY)
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise OpenAIError(401, "malformed Authorization header: expected 'Bearer <key>'",
                          code=ErrorCode.INVALID_API_KEY)
    return token


async def authenticate(request: Request) -> Principal:
    with child_span("gateway.auth"):
        principal = await _authenticate(request)
    request.state.principal = principal
    return principal


# The route parameter of an authenticated request: `principal: AuthPrincipal`.
AuthPrincipal = Annotated[Principal, Depends(authenticate)]


@dataclass
class AuthContext:
    """What authentication reads from `app.state.gateway`; the gateway's GatewayServices
    provides it too, so an app serving only the admin API (the standalone control plane) can
    use this alone."""
    snapshot_source: object
    settings: object  # GatewaySettings
    jwt: object | None = None


def install_auth(app, settings, snapshot_source) -> None:
    """Authentication for an app without the gateway's request path."""
    from common.auth.jwt_verifier import JWTVerifier

    jwt = JWTVerifier(settings.jwt) if settings.jwt.enabled else None
    app.state.gateway = AuthContext(snapshot_source, settings, jwt)


async def _authenticate(request: Request) -> Principal:
    state = request.app.state.gateway
    token = bearer_token(request)
    if looks_like_jwt(token):
        if state.jwt is None:
            raise OpenAIError(401, "JWT authentication is not enabled", code=ErrorCode.INVALID_API_KEY)
        principal = principal_from_claims(await state.jwt.claims(token), state.settings)
    else:
        principal = principal_from_key(state.snapshot_source.current, token)
    return principal


def require_role(*roles: str):
    """Dependency admitting principals whose role is at least the lowest of `roles`."""
    unknown = [r for r in roles if r not in ROLE_RANK]
    if unknown or not roles:
        raise ValueError(f"unknown roles {unknown}; expected some of {list(ROLE_RANK)}")
    needed = min(roles, key=ROLE_RANK.__getitem__)

    async def _require(principal: Principal = Depends(authenticate)) -> Principal:
        if not principal.has_role(needed):
            raise OpenAIError(403, f"this operation needs the {needed} role", code=ErrorCode.FORBIDDEN)
        return principal

    _require.required_role = needed  # read by common.openapi_doc (x-required-role)
    return _require

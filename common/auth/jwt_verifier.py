"""JWT bearer tokens: HS256 shared secret or a JWKS endpoint, issuer/audience checked,
claims mapped to the gateway's role/team/models."""
from __future__ import annotations

import asyncio

import jwt
from jwt import PyJWKClient
from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.error_codes import ErrorCode
from common.errors import OpenAIError


class JWTSettings(BaseModel):
    """The `jwt:` section of the gateway's settings."""
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    issuer: str | None = None
    audience: str | None = None
    jwks_url: str | None = None
    secret: str | None = None          # HS256 shared secret when no JWKS
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "HS256"])
    role_claim: str = "role"
    team_claim: str = "team"
    models_claim: str = "models"
    leeway_s: float = 0.0

    @model_validator(mode="after")
    def _needs_a_key(self) -> "JWTSettings":
        if self.enabled and not (self.jwks_url or self.secret):
            raise ValueError("jwt.enabled needs jwks_url or secret")
        return self


def looks_like_jwt(token: str) -> bool:
    return token.startswith("eyJ") and token.count(".") == 2


class JWTVerifier:
    def __init__(self, settings: JWTSettings):
        self.settings = settings
        self._jwks = PyJWKClient(settings.jwks_url, cache_keys=True) if settings.jwks_url else None

    async def _key(self, token: str):
        if self._jwks is None:
            return self.settings.secret
        # PyJWKClient fetches with blocking urllib on a cache miss: keep it off the event loop.
        signing_key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
        return signing_key.key

    async def claims(self, token: str) -> dict:
        s = self.settings
        algorithms = ["HS256"] if self._jwks is None else [a for a in s.algorithms if a != "HS256"]
        try:
            key = await self._key(token)
            return jwt.decode(
                token, key, algorithms=algorithms, audience=s.audience, issuer=s.issuer,
                leeway=s.leeway_s,
                options={"require": ["exp"], "verify_aud": s.audience is not None,
                         "verify_iss": s.issuer is not None},
            )
        except jwt.ExpiredSignatureError:
            raise OpenAIError(401, "token expired", code=ErrorCode.TOKEN_EXPIRED)
        except jwt.InvalidAudienceError:
            raise OpenAIError(401, "token audience is not accepted", code=ErrorCode.INVALID_TOKEN)
        except jwt.InvalidIssuerError:
            raise OpenAIError(401, "token issuer is not accepted", code=ErrorCode.INVALID_TOKEN)
        except (jwt.PyJWTError, ValueError) as exc:
            raise OpenAIError(401, f"invalid token: {type(exc).__name__}", code=ErrorCode.INVALID_TOKEN)

"""What a guardrail policy says, validated once wherever it is written (the YAML `guardrails:`
section, the admin API) and read back by the gateway from the registry snapshot.

    spec = PolicySpec.model_validate({"pii": {"email": "mask", "card": "block"},
                                      "banned_terms": ["project falcon"],
                                      "max_prompt_chars": 20000, "body_log": "full"})

A policy is bound to models and to keys (a key's binding wins over its model's); a request
no policy applies to pays nothing. Actions: `mask` replaces the match with its placeholder
(`[EMAIL]`), `block` refuses the request (400 guardrail_blocked, naming the rule), `log`
counts and lets it pass. Body logging (off / metadata / full) stores bodies after redaction.
"""
from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

POLICY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Action(StrEnum):
    MASK = "mask"
    BLOCK = "block"
    LOG = "log"


class PiiKind(StrEnum):
    """The detectors (gateway/guardrails/detectors.py); each match is masked as [KIND]."""
    EMAIL = "email"
    PHONE = "phone"
    CARD = "card"          # payment card numbers, Luhn-valid
    IBAN = "iban"          # checksum-valid
    IP = "ip"              # IPv4 / IPv6 addresses
    SECRET = "secret"      # API keys, tokens, JWTs, PEM private keys


class Direction(StrEnum):
    INPUT = "input"        # the request's prompt
    OUTPUT = "output"      # the model's answer


class BodyLog(StrEnum):
    OFF = "off"
    METADATA = "metadata"  # sizes and what the guardrails found, no text
    FULL = "full"          # redacted request and response bodies, truncated to a bound


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RegexRule(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=POLICY_NAME)
    pattern: str = Field(min_length=1, max_length=2000)
    action: Action = Action.BLOCK

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class ModerationSpec(_Strict):
    """An OpenAI-compatible POST {url} (…/v1/moderations) asked about the prompt; a flagged
    answer blocks. On a timeout or failure: fail_open lets the request pass, fail_closed
    answers 503."""
    url: str = Field(min_length=1, max_length=2000, pattern=r"^https?://")
    timeout_s: float = Field(2.0, gt=0, le=60)
    on_error: Literal["fail_open", "fail_closed"] = "fail_open"
    model: str | None = Field(None, max_length=200)
    api_key: str | None = Field(None, max_length=500)


Terms = Annotated[list[Annotated[str, Field(min_length=1, max_length=500)]],
                  Field(max_length=10_000)]


class PolicySpec(_Strict):
    pii: dict[PiiKind, Action] = Field(default_factory=dict)
    banned_terms: Terms = Field(default_factory=list)   # whole words, case-insensitive
    banned_terms_action: Action = Action.BLOCK
    regexes: list[RegexRule] = Field(default_factory=list, max_length=200)
    max_prompt_chars: int | None = Field(None, ge=1, le=100_000_000)
    moderation: ModerationSpec | None = None
    directions: list[Direction] = Field(
        default_factory=lambda: [Direction.INPUT, Direction.OUTPUT], min_length=1)
    phone_region: str = Field("US", pattern=r"^[A-Z]{2}$")   # numbers without a + prefix
    body_log: BodyLog = BodyLog.OFF
    body_max_chars: int = Field(16_384, ge=64, le=10_000_000)   # per body, then truncated

    @property
    def checks(self) -> bool:
        """Whether the policy inspects text at all (a body-log-only policy does not)."""
        return bool(self.pii or self.banned_terms or self.regexes or self.max_prompt_chars
                    or self.moderation)


class GuardrailSettings(_Strict):
    """The YAML `guardrails:` section: named policies and which models / keys (by key name)
    use them; written into the registry at start, where the admin API edits them too."""
    policies: dict[Annotated[str, Field(max_length=200, pattern=POLICY_NAME)], PolicySpec] = \
        Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)   # model name → policy
    keys: dict[str, str] = Field(default_factory=dict)     # key name → policy
    body_retention_days: float = Field(7.0, gt=0, le=3650)

    @model_validator(mode="after")
    def _bound_policies_exist(self) -> "GuardrailSettings":
        for where, bindings in (("models", self.models), ("keys", self.keys)):
            for target, policy in bindings.items():
                if policy not in self.policies:
                    raise ValueError(f"{where}.{target}: no policy named {policy!r}")
        return self


__all__ = ["Action", "BodyLog", "Direction", "GuardrailSettings", "ModerationSpec",
           "PiiKind", "PolicySpec", "RegexRule"]

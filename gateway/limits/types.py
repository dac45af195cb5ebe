"""Value types shared by every rate limiter: what to limit, what was reserved, what was decided."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

WINDOW_S = 60.0   # RPM / TPM are per rolling minute
BUCKET_S = 1.0    # sliding-window granularity: usage leaves the window one second at a time

Reason = Literal["rate_limit", "too_large", "budget", "unavailable"]


@dataclass(frozen=True)
class Limit:
    """One subject's limits. `scope` is what kind of subject (key, team, model, global) and
    `subject` its id. None means unlimited for that dimension."""
    scope: str
    subject: str
    rpm: int | None = None
    tpm: int | None = None

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{self.scope}:{self.subject} {name} must be >= 0, got {value}")


@dataclass(frozen=True)
class Counter:
    """One window counter: (limit, dimension) with the amount an admission adds to it."""
    name: str            # e.g. "key:tpm"
    storage_key: str     # e.g. "key:abc:tpm" (prefixed by the backend)
    limit: int
    kind: Literal["requests", "tokens"]


def counters_for(limits: list[Limit] | tuple[Limit, ...]) -> list[Counter]:
    counters = []
    for lim in limits:
        if lim.rpm is not None:
            counters.append(Counter(f"{lim.scope}:rpm", f"{lim.scope}:{lim.subject}:rpm", lim.rpm,
                                    "requests"))
        if lim.tpm is not None:
            counters.append(Counter(f"{lim.scope}:tpm", f"{lim.scope}:{lim.subject}:tpm", lim.tpm,
                                    "tokens"))
    return counters


@dataclass
class Reservation:
    """Tokens held against the TPM counters until `reconcile` settles them with the real count.

    `bucket_ms` is the window bucket the reservation was charged to, so a refund comes out of the
    same bucket (and is a no-op once that bucket has left the window)."""
    tokens: int
    bucket_ms: int
    token_keys: tuple[str, ...]
    settled: bool = False


@dataclass(frozen=True)
class CounterState:
    name: str
    kind: Literal["requests", "tokens"]
    limit: int
    used: int          # usage in the window, including this admission when allowed
    reset_s: float     # seconds until the oldest usage in the window expires


@dataclass
class Decision:
    """Outcome of `RateLimiter.acquire`. When `allowed` is False, `tripped` names the counter
    (e.g. "team:tpm") and `retry_after` says when that request could fit."""
    allowed: bool
    reservation: Reservation | None = None
    reason: Reason | None = None
    tripped: str | None = None
    retry_after: float | None = None
    counters: list[CounterState] = field(default_factory=list)
    detail: str | None = None  # a full message, when the limit has more to say

    @property
    def message(self) -> str:
        if self.allowed:
            return "ok"
        if self.detail:
            return self.detail
        if self.reason == "too_large":
            return f"request needs more tokens than the {self.tripped} limit allows in a minute"
        if self.reason == "budget":
            return f"budget exhausted for {self.tripped}"
        if self.reason == "unavailable":
            return "rate limit store unavailable"
        return f"rate limit exceeded: {self.tripped}"

    def headers(self) -> dict[str, str]:
        """OpenAI-style x-ratelimit-* headers from the tightest requests and tokens counters,
        plus retry-after on rejection."""
        out: dict[str, str] = {}
        for kind in ("requests", "tokens"):
            tightest = _tightest(self.counters, kind)
            if tightest is None:
                continue
            out[f"x-ratelimit-limit-{kind}"] = str(tightest.limit)
            out[f"x-ratelimit-remaining-{kind}"] = str(max(0, tightest.limit - tightest.used))
            out[f"x-ratelimit-reset-{kind}"] = format_duration(tightest.reset_s)
        if not self.allowed and self.retry_after is not None:
            out["retry-after"] = str(max(1, math.ceil(self.retry_after)))
        return out


def _tightest(counters: list[CounterState], kind: str) -> CounterState | None:
    matching = [c for c in counters if c.kind == kind]
    if not matching:
        return None
    return min(matching, key=lambda c: (c.limit - c.used, c.limit))


def format_duration(seconds: float) -> str:
    """OpenAI's reset format: "0.5s", "12s", "1m30s"."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        text = f"{seconds:.3f}".rstrip("0").rstrip(".")
        return f"{text or '0'}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest}s"

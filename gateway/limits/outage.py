"""Redis outage handling shared by the Redis-backed stores: which errors mean "store down",
how a client is built so a dead Redis fails fast, and logging once per outage."""
from __future__ import annotations

import asyncio
import logging
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger("gateway.limits")

FailMode = Literal["fail_open", "fail_closed"]
STORE_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


def check_fail_mode(mode: str) -> FailMode:
    if mode not in ("fail_open", "fail_closed"):
        raise ValueError(f"fail_mode must be 'fail_open' or 'fail_closed', got {mode!r}")
    return mode  # type: ignore[return-value]


def make_client(url: str, timeout_s: float = 0.5) -> aioredis.Redis:
    # Short timeouts: a dead Redis must cost a request milliseconds, not a hang.
    return aioredis.Redis.from_url(url, socket_timeout=timeout_s,
                                   socket_connect_timeout=timeout_s, retry_on_timeout=False)


class OutageLog:
    """Logs the first failure of an outage and the recovery, not every failed call."""

    def __init__(self, what: str, fail_mode: FailMode) -> None:
        self.what = what
        self.fail_mode = fail_mode
        self.down = False
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if not self.down:
            self.down = True
            log.error("%s: Redis unavailable (%s: %s); %s until it returns", self.what,
                      type(exc).__name__, exc, self.fail_mode.replace("_", " "))

    def succeeded(self) -> None:
        if self.down:
            self.down = False
            log.warning("%s: Redis reachable again after %d failed calls", self.what,
                        self.failures)
            self.failures = 0

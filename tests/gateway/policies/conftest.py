"""Shared fixtures: the real Redis at 127.0.0.1:6379 with a unique key prefix per test."""
from __future__ import annotations

import socket
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.limits import InMemoryRateLimiter, RedisRateLimiter

REDIS_URL = "redis://127.0.0.1:6379/0"


class FakeClock:
    """Wall-clock stand-in so window expiry can be tested without sleeping a minute."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def redis_client():
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def redis_prefix(redis_client):
    prefix = f"test:{uuid.uuid4().hex}:"
    yield prefix
    keys = [k async for k in redis_client.scan_iter(match=prefix + "*")]
    if keys:
        await redis_client.delete(*keys)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "redis"])
async def limiter(request, redis_client, redis_prefix, clock):
    """The same semantic tests run against both implementations."""
    if request.param == "memory":
        yield InMemoryRateLimiter(clock=clock)
    else:
        yield RedisRateLimiter(redis_client, prefix=redis_prefix, clock=clock)


@pytest.fixture
def closed_port_url() -> str:
    """A Redis URL nothing listens on: an outage without touching the shared Redis."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"

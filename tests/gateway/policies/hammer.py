"""Load generator for the limiter concurrency test; also runnable as a separate OS process:
python -m tests.gateway.policies.hammer REDIS_URL PREFIX TPM START_AT DURATION_S SEED -> prints JSON."""
from __future__ import annotations

import asyncio
import json
import random
import sys
import time

from gateway.limits import Limit, RateLimiter, RedisRateLimiter


def hammer_limits(tpm: int) -> list[Limit]:
    return [Limit("key", "shared", tpm=tpm), Limit("global", "*", rpm=1_000_000)]


async def hammer(limiter: RateLimiter, tpm: int, deadline: float, seed: int,
                 tasks: int = 8) -> dict:
    """Many coroutines acquiring random token amounts until the deadline."""
    admitted = {"tokens": 0, "requests": 0, "rejected": 0}
    limits = hammer_limits(tpm)

    async def one(rng: random.Random) -> None:
        while time.time() < deadline:
            tokens = rng.randint(1, 60)
            decision = await limiter.acquire(limits, tokens)
            if decision.allowed:
                admitted["tokens"] += tokens
                admitted["requests"] += 1
            else:
                admitted["rejected"] += 1
                await asyncio.sleep(0.002)

    await asyncio.gather(*(one(random.Random(seed * 100 + i)) for i in range(tasks)))
    return admitted


async def _main(url: str, prefix: str, tpm: int, start_at: float, duration: float,
                seed: int) -> None:
    limiter = RedisRateLimiter(url, prefix=prefix, fail_mode="fail_closed")
    await asyncio.sleep(max(0.0, start_at - time.time()))
    result = await hammer(limiter, tpm, start_at + duration, seed)
    result["store_failures"] = limiter.outage.failures
    await limiter.close()
    print(json.dumps(result))


if __name__ == "__main__":
    url, prefix, tpm, start_at, duration, seed = sys.argv[1:7]
    asyncio.run(_main(url, prefix, int(tpm), float(start_at), float(duration), int(seed)))

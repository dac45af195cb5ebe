"""A key's TPM limit holds across two gateway replicas: Redis is the single source of truth.

Every request is a /v1/completions call with a token-id prompt (counted exactly, no estimate)
and ignore_eos, so its admission reservation (prompt + max_tokens) equals what the engine
really uses and reconciliation refunds nothing: the sum over admitted requests is exactly the
tokens the limiter let through. Two independent in-process limiters would admit twice the limit.
"""
from __future__ import annotations

import asyncio

import httpx

from tests.e2e.multi_replica.conftest import MODEL, TPM_LIMIT

PROMPT_TOKENS = 10
MAX_TOKENS = 10
PER_REQUEST = PROMPT_TOKENS + MAX_TOKENS
CAPACITY = TPM_LIMIT // PER_REQUEST          # requests one shared window can admit
REQUESTS = 3 * CAPACITY                      # 1.5x what two separate limiters would admit


def body(i: int) -> dict:
    prompt = [100 + (i * 7 + j) % 5000 for j in range(PROMPT_TOKENS)]
    return {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "temperature": 0}


async def fire(base_urls: list[str], secret: str, concurrency: int) -> list[tuple[int, int, dict]]:
    """(gateway index, status, json) per request, alternating gateways."""
    limits = httpx.Limits(max_connections=concurrency * 2)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False,
                                 headers={"authorization": f"Bearer {secret}"}) as client:
        async def one(i: int):
            gw = i % len(base_urls)
            async with sem:
                r = await client.post(f"{base_urls[gw]}/v1/completions", json=body(i))
            return gw, r.status_code, r.json()
        return await asyncio.gather(*(one(i) for i in range(REQUESTS)))


async def test_tpm_limit_is_shared_by_both_replicas(deployment):
    results = await fire(deployment.gateways, deployment.secret, concurrency=48)
    admitted = [(gw, data) for gw, status, data in results if status == 200]
    refused = [(gw, data) for gw, status, data in results if status == 429]
    other = [(gw, status, data) for gw, status, data in results if status not in (200, 429)]
    assert not other, other[:3]
    # The engine really used what was reserved, so no refund reopened the window.
    assert all(d["usage"]["total_tokens"] == PER_REQUEST for _, d in admitted), admitted[:2]
    admitted_tokens = len(admitted) * PER_REQUEST
    assert admitted_tokens <= TPM_LIMIT * 1.01, (len(admitted), admitted_tokens)
    # ... and the limit was reached, not undershot: the shared window filled up.
    assert admitted_tokens >= TPM_LIMIT - PER_REQUEST, (len(admitted), admitted_tokens)
    # Both replicas served and both refused: each consulted the same counters.
    assert {gw for gw, _ in admitted} == {0, 1}
    assert {gw for gw, _ in refused} == {0, 1}
    assert all(d["error"]["code"] == "rate_limit_exceeded" for _, d in refused), refused[:2]


async def test_refusal_says_when_to_retry(deployment):
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        r = await client.post(f"{deployment.gateways[1]}/v1/completions", json=body(0),
                              headers={"authorization": f"Bearer {deployment.secret}"})
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["type"] == "rate_limit_error"

"""The external moderation hook: an OpenAI-compatible `POST /v1/moderations` asked about a
request's prompt, within a timeout.

    verdict = await moderate(spec, ["text one", "text two"])
    verdict.flagged        # True: some input was flagged (the request is blocked)
    verdict.failed         # the endpoint did not answer in time or not in the expected shape
    verdict.categories     # the flagged categories' names, for the error message

What a failure means (pass or 503) is the policy's `on_error`; the caller decides.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import httpx

from common.guardrail_spec import ModerationSpec

log = logging.getLogger("inferplane.gateway.guardrails")


@dataclass(frozen=True, slots=True)
class Verdict:
    flagged: bool = False
    failed: bool = False
    categories: tuple[str, ...] = ()


async def moderate(spec: ModerationSpec, texts: list[str]) -> Verdict:
    body: dict = {"input": texts}
    if spec.model:
        body["model"] = spec.model
    headers = {"authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    try:
        # the whole exchange (connect, send, read) is bounded, not each phase on its own
        async with httpx.AsyncClient(timeout=spec.timeout_s) as client:
            response = await asyncio.wait_for(client.post(spec.url, json=body, headers=headers),
                                              spec.timeout_s)
        response.raise_for_status()
        return _verdict(response.json())
    except (httpx.HTTPError, asyncio.TimeoutError, ValueError, TypeError, KeyError) as exc:
        log.warning("moderation endpoint %s failed: %s", spec.url, type(exc).__name__)
        return Verdict(failed=True)


def _verdict(answer: dict) -> Verdict:
    results = answer["results"]
    if not isinstance(results, list):
        raise TypeError("results is not a list")
    categories: list[str] = []
    flagged = False
    for result in results:
        if result.get("flagged"):
            flagged = True
            categories += [name for name, hit in (result.get("categories") or {}).items()
                           if hit is True]
    return Verdict(flagged=flagged, categories=tuple(sorted(set(categories))))


__all__ = ["Verdict", "moderate"]

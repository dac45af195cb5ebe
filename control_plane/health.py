"""Health probing of backends the control plane does not supervise (vLLM, TGI, hosted...).

Managed builtin engines report through the supervisor; every other backend is probed here:
GET {base}/models must answer 200 within the timeout, `failures_to_down` misses mark it down,
one success marks it ready again. State changes go to the registry (which bumps the snapshot).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

import httpx
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from registry.models import Backend

from .bootstrap import set_backend_state

log = logging.getLogger("inferplane.health")


class HealthProber:
    def __init__(self, sessions: sessionmaker, on_change: Callable[[], None],
                 interval_s: float = 2.0, timeout_s: float = 2.0, failures_to_down: int = 2):
        self.sessions, self.on_change = sessions, on_change
        self.interval_s, self.timeout_s, self.failures_to_down = interval_s, timeout_s, failures_to_down
        self._misses: dict[str, int] = {}

    def _targets(self) -> list[tuple[str, str]]:
        with self.sessions() as session:
            rows = session.scalars(select(Backend).where(Backend.managed.is_(False))).all()
            return [(r.url, r.state) for r in rows]

    async def probe_once(self, client: httpx.AsyncClient) -> None:
        targets = await asyncio.to_thread(self._targets)
        results = await asyncio.gather(*(self._probe(client, url) for url, _ in targets))
        changed = False
        for (url, state), healthy in zip(targets, results):
            misses = 0 if healthy else self._misses.get(url, 0) + 1
            self._misses[url] = misses
            wanted = "ready" if healthy else ("down" if misses >= self.failures_to_down else state)
            if wanted != state:
                log.info("backend %s is now %s", url, wanted)
                changed |= await asyncio.to_thread(set_backend_state, self.sessions, url, wanted,
                                                   None if healthy else "health probe failed")
        if changed:
            self.on_change()

    async def _probe(self, client: httpx.AsyncClient, url: str) -> bool:
        try:
            return (await client.get(url + "/models", timeout=self.timeout_s)).status_code == 200
        except httpx.HTTPError:
            return False

    async def run(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    await self.probe_once(client)
                except Exception:  # the database may be down: keep probing, keep serving
                    log.exception("health probe round failed")
                await asyncio.sleep(self.interval_s)

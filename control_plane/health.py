"""Health probing of backends the control plane does not supervise (vLLM, TGI, hosted...).

Managed builtin engines report through the supervisor; every other backend is probed here:
GET {base}/models must answer 200 within the timeout, `failures_to_down` misses mark it down,
one success marks it ready again. State changes go to the registry (which bumps the snapshot).
State belongs to a backend row, not to its URL: a probe result is written to the rows probed
(by id) and misses are counted per row, so an unmanaged row registered at a managed engine's
URL never changes the managed row (the supervisor reports that one). A URL several rows share
is fetched once per round.
Every probe first passes the backend allowlist (control_plane.backend_allowlist), with the
host resolved then and the checked address connected to: a refused backend is never contacted
and counts as a miss.
After every round, inferplane_backend_healthy is set for every registered backend once a
registry to export it in is given (`prober.export_to(registry)`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

import httpx
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from common.vocabulary import BackendState
from control_plane.backend_allowlist import DEFAULT, BackendAllowlist
from control_plane.health_gauge import BackendHealthGauge
from registry.errors import InvalidError
from registry.orm.catalog import Backend
from registry.queries import bump_snapshot_version, set_backend_state

log = logging.getLogger("inferplane.health")


class HealthProber:
    def __init__(self, sessions: sessionmaker, on_change: Callable[[], None],
                 interval_s: float = 2.0, timeout_s: float = 2.0, failures_to_down: int = 2,
                 allowlist: BackendAllowlist = DEFAULT):
        self.sessions, self.on_change, self.allowlist = sessions, on_change, allowlist
        self._refused: set[str] = set()  # URLs whose refusal was logged
        self.interval_s, self.timeout_s, self.failures_to_down = interval_s, timeout_s, failures_to_down
        self._misses: dict[int, int] = {}  # backend id -> consecutive failed probes
        self.gauge: BackendHealthGauge | None = None

    def export_to(self, registry) -> None:
        """Serve inferplane_backend_healthy in `registry`, set at once and after every round."""
        self.gauge = BackendHealthGauge(registry)
        self.gauge.publish(self.gauge.read(self.sessions))

    def _targets(self) -> list[tuple[int, str, str]]:
        """(id, url, state) of every unmanaged backend row."""
        with self.sessions() as session:
            rows = session.scalars(select(Backend).where(Backend.managed.is_(False))).all()
            return [(r.id, r.url, r.state) for r in rows]

    async def probe_once(self, client: httpx.AsyncClient) -> None:
        targets = await asyncio.to_thread(self._targets)
        urls = sorted({url for _, url, _ in targets})
        healthy_by_url = dict(zip(urls, await asyncio.gather(
            *(self._probe(client, url) for url in urls))))
        live = {backend_id for backend_id, _, _ in targets}
        self._misses = {i: n for i, n in self._misses.items() if i in live}  # rows deleted
        changed = False
        for backend_id, url, state in targets:
            healthy = healthy_by_url[url]
            misses = 0 if healthy else self._misses.get(backend_id, 0) + 1
            self._misses[backend_id] = misses
            wanted = (BackendState.READY if healthy
                      else BackendState.DOWN if misses >= self.failures_to_down else state)
            if wanted != state:
                log.info("backend %d (%s) is now %s", backend_id, url, wanted)
                changed |= await asyncio.to_thread(self._set_state, backend_id, wanted,
                                                   None if healthy else "health probe failed")
        if changed:
            self.on_change()
        if self.gauge is not None:
            self.gauge.publish(await asyncio.to_thread(self.gauge.read, self.sessions))

    def _set_state(self, backend_id: int, state: str, error: str | None) -> bool:
        """True when the row changed (the snapshot version is bumped then)."""
        with self.sessions.begin() as session:
            if session.get(Backend, backend_id) is None:  # deleted since this round began
                return False
            changed = set_backend_state(session, backend_id, state, error)[1]
            if changed:
                bump_snapshot_version(session)
            return changed

    async def _probe(self, client: httpx.AsyncClient, url: str) -> bool:
        try:
            target = await asyncio.to_thread(self.allowlist.pin, url)
        except InvalidError as exc:
            if url not in self._refused:
                self._refused.add(url)
                log.warning("backend %s is not probed: %s", url, exc.message)
            return False
        self._refused.discard(url)
        headers = {"host": target.host_header} if target.host_header else None
        try:
            response = await client.get(target.url + "/models", timeout=self.timeout_s,
                                        headers=headers)
            return response.status_code == 200
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

"""Leader election through the registry's database (`leader.lock: database`, the default).

PostgreSQL: a session-level advisory lock held on a dedicated connection. When the leader dies
its connection closes and the lock frees, so a standby takes over within one poll. If the
leader loses its connection it can no longer know it leads, so it stops (its supervisor
restarts it as a standby). SQLite is the embedded, single-host case: always the leader.
"""
from __future__ import annotations

import asyncio
import logging

from sqlalchemy.engine import make_url

from control_plane.leadership.standby import stand_by
from registry.db import normalize_url

log = logging.getLogger("inferplane.leader")

LOCK_KEY = 0x1F_E7_9A_1E  # any fixed 64-bit key shared by every control plane of a database


class AdvisoryLock:
    def __init__(self, database_url: str, poll_s: float = 1.0):
        self.url = normalize_url(database_url)
        self.poll_s = poll_s
        self._conn = None

    @property
    def exclusive(self) -> bool:
        return make_url(self.url).get_backend_name() == "postgresql"

    def _try_acquire(self) -> bool:
        import psycopg

        url = make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)
        conn = psycopg.connect(url, autocommit=True)
        if conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]:
            self._conn = conn
            return True
        conn.close()
        return False

    async def acquire(self, on_wait=None) -> None:
        """Return once this process leads (at once on SQLite)."""
        if not self.exclusive:
            return
        await stand_by(lambda: asyncio.to_thread(self._try_acquire), self.poll_s, on_wait)
        log.info("leading this control plane")

    async def hold(self) -> None:
        """Return when leadership is lost (the lock's connection broke); never on SQLite."""
        if self._conn is None:
            await asyncio.Event().wait()
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await asyncio.to_thread(self._conn.execute, "SELECT 1")
            except Exception as exc:
                log.error("lost the leader lock's connection: %s", exc)
                return

    async def release(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

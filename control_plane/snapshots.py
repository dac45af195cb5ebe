"""Where the gateway gets its RoutingSnapshot.

`SnapshotSource` polls registry_state.version (one tiny query every poll interval) and
rebuilds the snapshot only when it moved. With a Redis URL it also listens on a pub/sub
channel, so a change made through another control-plane replica lands without waiting for
the next poll. When the database is unreachable it keeps serving the last good snapshot:
routing must survive a database outage, only registry changes stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from registry.queries import get_snapshot_version
from registry.snapshot import RoutingSnapshot, build_snapshot

log = logging.getLogger("inferplane.snapshots")

SNAPSHOT_CHANNEL = "inferplane:snapshot"
DEFAULT_POLL_INTERVAL_S = 0.25
REDIS_RETRY_S = 2.0

Listener = Callable[[RoutingSnapshot], None]


class StaticSnapshotSource:
    """A fixed snapshot (tests, or a gateway run from a file); `set()` swaps it."""

    def __init__(self, snapshot: RoutingSnapshot | None = None):
        self.current = snapshot or RoutingSnapshot.empty()   # read it; `set()` swaps it

    def set(self, snapshot: RoutingSnapshot) -> None:
        self.current = snapshot

    def refresh(self, force: bool = True) -> RoutingSnapshot:
        return self.current

    async def run(self) -> None:
        await asyncio.Event().wait()


class SnapshotSource:
    def __init__(self, session_factory: sessionmaker[Session], *,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S, redis_url: str | None = None,
                 channel: str = SNAPSHOT_CHANNEL):
        self._sessions = session_factory
        self.poll_interval_s = poll_interval_s
        self.redis_url = redis_url
        self.channel = channel
        # the snapshot requests read (a plain attribute: read a few times a request; swapped
        # whole by `refresh`)
        self.current = RoutingSnapshot.empty()
        self._loaded = False  # the empty snapshot is a placeholder, not a database version
        self._lock = threading.Lock()  # admin threads and the poller may refresh at once
        self._db_ok = True
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task] = []

    @property
    def database_ok(self) -> bool:
        return self._db_ok

    def add_listener(self, listener: Listener) -> None:
        """Called (in the refreshing thread) with every newly built snapshot."""
        self._listeners.append(listener)

    # --- refreshing -----------------------------------------------------------------------

    def refresh(self, force: bool = True) -> RoutingSnapshot:
        """Rebuild from the database (only if the version moved, unless force); on a database
        error keep the last snapshot. Safe to call from any thread."""
        with self._lock:
            try:
                with self._sessions() as session:
                    # After an outage rebuild regardless: a restored database can carry
                    # the same version number with different contents.
                    if not force and self._loaded and self._db_ok and \
                            get_snapshot_version(session) == self.current.version:
                        self._mark_db(True)
                        return self.current
                    snapshot = build_snapshot(session)
            except Exception as exc:  # noqa: BLE001 - any driver error means "keep serving"
                self._mark_db(False, exc)
                return self.current
            self._mark_db(True)
            changed = not self._loaded or snapshot != self.current
            self.current, self._loaded = snapshot, True
        if changed:
            self._notify(snapshot)
        return snapshot

    def _mark_db(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and not self._db_ok:
            log.info("registry database reachable again; snapshot v%d", self.current.version)
        elif not ok and self._db_ok:
            # Once per outage: a poll every 250 ms would otherwise flood the log.
            log.warning("registry database unreachable, serving snapshot v%d until it is back: %s",
                        self.current.version, exc)
        self._db_ok = ok

    def _notify(self, snapshot: RoutingSnapshot) -> None:
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                log.exception("snapshot listener failed")

    def publish(self, version: int | None = None) -> None:
        """Tell other replicas (through Redis) that the registry changed."""
        if not self.redis_url:
            return
        import redis

        try:
            client = redis.Redis.from_url(self.redis_url, socket_timeout=1.0)
            try:
                client.publish(self.channel, str(self.current.version if version is None else version))
            finally:
                client.close()
        except redis.RedisError as exc:
            log.warning("could not publish snapshot change to Redis (pollers still see it): %s", exc)

    # --- background -----------------------------------------------------------------------

    async def run(self) -> None:
        """Poll (and listen on Redis when configured) until cancelled."""
        await asyncio.to_thread(self.refresh)
        tasks = [asyncio.create_task(self._poll())]
        if self.redis_url:
            tasks.append(asyncio.create_task(self._listen()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def start(self) -> None:
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self.run()))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            await asyncio.to_thread(self.refresh, False)

    async def _listen(self) -> None:
        import redis.asyncio as aioredis

        while True:
            client = aioredis.Redis.from_url(self.redis_url)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await asyncio.to_thread(self.refresh, False)
            except (aioredis.RedisError, OSError) as exc:
                log.warning("snapshot notifications from Redis lost, polling only: %s", exc)
                await asyncio.sleep(REDIS_RETRY_S)
            finally:
                await client.aclose()

"""Optional sync between the Inferplane registry and an MLflow Model Registry: registered
models, versions and aliases (champion, challenger, ...) in either or both directions, using
MLflow's alias API (stages are deprecated and never touched).

A sync run reads MLflow once, then merges model by model inside one database transaction; the
registry snapshot version is bumped only when Inferplane itself changed, so an idle sync loop
never makes gateways rebuild their routing tables. See registry/mlflow_merge.py for the
conflict rules."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from registry.mlflow_merge import LOCAL_NAME, ModelMerge, SyncReport, SyncTarget
from registry.mlflow_remote import MlflowRegistry, RemoteModel
from registry.orm.catalog import Model
from registry.queries import bump_snapshot_version

log = logging.getLogger("inferplane.mlflow_sync")

DIRECTIONS = ("pull", "push", "both")


class MlflowSync:
    """`prefix` scopes the sync to MLflow models named prefix + <Inferplane model name>."""

    def __init__(self, sessions: sessionmaker[Session], tracking_uri: str,
                 actor: str = "mlflow-sync", prefix: str = "",
                 registry: MlflowRegistry | None = None):
        if not tracking_uri:
            raise ValueError("tracking_uri is required")
        if "'" in prefix and '"' in prefix:
            raise ValueError(f"prefix cannot hold both quote kinds: {prefix!r}")
        self.sessions = sessions
        self.tracking_uri = tracking_uri
        self.actor = actor
        self.prefix = prefix
        self.target = f"{tracking_uri}#{prefix}"
        self._registry = registry
        # The interval loop and on-demand admin calls share one MLflow and one database.
        self._lock = threading.Lock()
        self.last_report: SyncReport | None = None
        self.last_error: str | None = None
        self.last_run_at: float | None = None

    @property
    def registry(self) -> MlflowRegistry:
        if self._registry is None:  # imports mlflow on first use only
            self._registry = MlflowRegistry(self.tracking_uri)
        return self._registry

    def pull(self) -> SyncReport:
        return self.sync_once("pull")

    def push(self) -> SyncReport:
        return self.sync_once("push")

    def sync_once(self, direction: str = "both") -> SyncReport:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, "
                             f"got {direction!r}")
        with self._lock:
            self.last_run_at = time.time()
            try:
                self.last_report = self._sync(direction)
                self.last_error = None
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            return self.last_report

    def status(self) -> dict[str, Any]:
        return {"tracking_uri": self.tracking_uri, "prefix": self.prefix,
                "last_run_at": self.last_run_at, "last_error": self.last_error,
                "last_report": self.last_report.to_dict() if self.last_report else None}

    def _sync(self, direction: str) -> SyncReport:
        registry = self.registry
        registry.check()
        remote = {name[len(self.prefix):]: model
                  for name, model in registry.list_models(self.prefix).items()}
        report = SyncReport(direction)
        target = SyncTarget(registry, self.target, self.actor,
                            pulls=direction in ("pull", "both"),
                            pushes=direction in ("push", "both"))
        with self.sessions.begin() as session:
            local = {m.name: m for m in session.scalars(select(Model))}
            for name in sorted(self._names(target, local, remote, report)):
                ModelMerge(target, session, report, name, self.prefix + name,
                           local.get(name), remote.get(name)).run()
            if report.inferplane_changes:
                report.snapshot_version = bump_snapshot_version(session)
        return report

    def _names(self, target: SyncTarget, local: dict[str, Model],
               remote: dict[str, RemoteModel], report: SyncReport) -> set[str]:
        names = {name for name in local if target.pushes or name in remote}
        for name, model in remote.items():
            if model.problem:
                report.skipped.append(f"MLflow model {model.name}: {model.problem}")
                names.discard(name)
            elif name in local or not target.pulls:
                continue
            elif not LOCAL_NAME.match(name) or len(name) > 200:
                report.skipped.append(f"MLflow model {model.name} not imported: Inferplane "
                                      f"model names must match {LOCAL_NAME.pattern}")
            else:
                names.add(name)
        return names

    async def run(self, interval_s: float, direction: str = "both",
                  stop: asyncio.Event | None = None) -> None:
        """Sync every interval_s until cancelled or `stop` is set; a failed run is logged
        and retried at the next tick, so an MLflow outage never stops the control plane."""
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                report = await asyncio.to_thread(self.sync_once, direction)
                if report.changed or report.skipped:
                    log.info("mlflow sync: %s", report.to_dict())
            except Exception:
                log.exception("mlflow sync with %s failed; retrying in %.0fs",
                              self.tracking_uri, interval_s)
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except asyncio.TimeoutError:
                pass

"""The apps the server processes run, and the pieces `up` reuses to put them in one app:

    async with control_plane_app(settings, gateway_metrics_urls) as app: ...
                                   # admin API, console, /metrics, fleet and controllers
    await serve_gateway(settings, sock, link=None)
                                   # one gateway process (`link`: a worker of `up --workers`)
    controller = mount_control_plane(app, sessions, snapshots, registry, tiers, make_controller)
    loop = mlflow_sync(settings, app, sessions, snapshots)   # None without MLflow configured
    async with usage_to_sql(app, sessions, settings): ...    # gateway usage rows into SQL
    async with usage_from_workers(sessions, settings): ...   # what `up`'s workers hand off
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from control_plane.fleet import prepare_database, running_fleet
from control_plane.server_process import configure_engine_keys, uvicorn_server
from control_plane.settings import Settings

log = logging.getLogger("inferplane")


def gateway_settings(settings: Settings):
    return settings.gateway  # validated with the file, top-level routing/redis_url applied


def on_registry_change(snapshots):
    def refresh() -> None:
        snapshots.refresh()
        snapshots.publish()
    return refresh


def mount_control_plane(app, sessions, snapshots, registry, tiers, make_controller):
    """Admin API and tiers routes on `app`; returns `make_controller(slo)`, the rollout
    controller built around the SLO tracker the admin API shares."""
    from control_plane.admin import include_admin_routers
    from control_plane.slo import SloTracker
    from control_plane.tiers import build_tiers_router

    slo = SloTracker(sessions, registry=registry)
    include_admin_routers(app, sessions, snapshots, slo)
    app.include_router(build_tiers_router(tiers))
    return make_controller(slo)


def mlflow_sync(settings: Settings, app, sessions, snapshots):
    """The optional MLflow Model Registry sync: its admin route now, its loop as a coroutine."""
    if settings.mlflow is None:
        return None
    from control_plane.mlflow_api import build_mlflow_router
    from registry.mlflow_sync import MlflowSync

    sync = MlflowSync(sessions, settings.mlflow.tracking_uri, prefix=settings.mlflow.prefix)
    app.include_router(build_mlflow_router(sync, snapshots))
    return sync.run(settings.mlflow.interval_s, settings.mlflow.direction)


def usage_spool(settings: Settings):
    """<data_dir>/usage-spool (common.usage_spool), or None where it cannot be made."""
    from common.usage_spool import UsageSpool

    try:
        return UsageSpool(Path(settings.data_dir) / "usage-spool")
    except OSError as exc:   # a read-only data_dir: usage still flows, unspooled
        log.warning("usage spool unavailable (%s): a killed gateway loses its unwritten usage",
                    exc)
        return None


@contextlib.asynccontextmanager
async def usage_to_sql(app, sessions, settings: Settings, hand_off: bool = False):
    """Usage rows flow from the gateway to SQL in batches; the last batch is flushed on exit.
    Stored bodies are kept `settings.guardrails.body_retention_days`. Until written, records
    are also spooled under <data_dir>/usage-spool, so a gateway process killed outright loses
    none; the next one to start writes them. With `hand_off` (a worker of `up --workers N`)
    this process only spools them and its control plane writes them (usage_from_workers)."""
    from common.usage_handoff import SpoolHandoff
    from control_plane.usage_sink import sql_usage_writer

    spool = usage_spool(settings)
    if hand_off and spool is not None:
        writer = SpoolHandoff(spool)
    else:
        writer = sql_usage_writer(sessions, spool=spool, body_retention_s=_body_retention_s(
            settings))
    await writer.start()
    app.state.gateway.usage_sinks.append(writer.record)
    try:
        yield writer
    finally:
        await writer.close()


@contextlib.asynccontextmanager
async def usage_from_workers(sessions, settings: Settings):
    """The control plane of `up --workers N` (or the supervisor of `gateway --workers N`)
    writes the usage its workers hand off, until the block exits (after the workers stopped:
    their last segments are written then)."""
    from control_plane.usage_sink import sql_usage_collector

    spool = usage_spool(settings)
    if spool is None:   # then the workers have none either and write their own
        yield None
        return
    collector = sql_usage_collector(sessions, spool,
                                    body_retention_s=_body_retention_s(settings))
    await collector.start()
    try:
        yield collector
    finally:
        await collector.close()


@contextlib.asynccontextmanager
async def usage_from_gateway_workers(settings: Settings):
    """`usage_from_workers` for the supervisor of `gateway --workers N`, on a database
    connection of its own (opened after the fork, so no worker shares it)."""
    from registry.db import make_session_factory

    sessions = make_session_factory(settings.resolved_database_url())
    try:
        async with usage_from_workers(sessions, settings) as collector:
            yield collector
    finally:
        sessions.kw["bind"].dispose()


def _body_retention_s(settings: Settings) -> float:
    return settings.guardrails.body_retention_days * 86400


def allowlist(settings: Settings):
    from control_plane.backend_allowlist import BackendAllowlist

    return BackendAllowlist.from_networks(settings.backends.allowed_networks)


async def serve_gateway(settings: Settings, sock, link=None, hand_off_usage: bool = False) -> None:
    """One gateway process; with `link` (an up_workers.ControlPlaneLink) a worker of `up`.
    A worker of `up`, or of `gateway --workers N` (`hand_off_usage`), spools its usage for
    the process above it to write (usage_from_workers)."""
    from control_plane.snapshots import SnapshotSource
    from registry.db import make_session_factory

    if link is not None:   # the registry exists once the control plane answers
        await link.wait_ready()
    # Replicas read the registry the control plane migrates and writes; they write only the
    # Files and Batch APIs' rows (files, batches, batch_results).
    configure_engine_keys(settings, create=False)
    sessions = make_session_factory(settings.resolved_database_url())
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    snapshots.refresh()
    task = asyncio.create_task(snapshots.run())
    try:
        from gateway.app import create_gateway_app
        cold_starter = link.cold_starter(snapshots) if link is not None else None
        app = create_gateway_app(gateway_settings(settings), snapshots, cold_starter=cold_starter,
                                 sessions=sessions)
        front = link.front(app, cold_starter) if link is not None else contextlib.nullcontext(app)
        async with usage_to_sql(app, sessions, settings,
                                hand_off=hand_off_usage or link is not None), \
                front as served:
            await uvicorn_server(served, settings).serve(sockets=[sock])
    finally:
        task.cancel()


def analysis_source(settings: Settings, urls: list[str], registry):
    """Where rollout analysis reads the gateways' per-version metrics: Prometheus
    (`analysis.source: prometheus`), else the gateways' /metrics at `urls`, else `registry`
    (the gateway serving in this process)."""
    from control_plane.rollouts.metrics_source import MetricsSource, RegistryMetricsSource
    from control_plane.rollouts.prometheus_source import PrometheusMetricsSource

    if settings.analysis.source == "prometheus":
        return PrometheusMetricsSource(settings.analysis.prometheus)
    return MetricsSource(urls) if urls else RegistryMetricsSource(registry)


@contextlib.asynccontextmanager
async def control_plane_app(settings: Settings, gateway_metrics_urls: list[str],
                            workers_usage: bool = False):
    """The control plane's app (admin API, console, /metrics) with its fleet and controllers
    running until the block exits; rollouts analyse the gateways at `gateway_metrics_urls`.
    `workers_usage`: it also writes the usage the gateway workers of its `up` hand off."""
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry, make_asgi_app

    from common.auth.authenticate import install_auth
    from control_plane.console import mount_console
    from control_plane.rollouts import RolloutController
    from control_plane.snapshots import SnapshotSource

    configure_engine_keys(settings, create=True)
    if not gateway_metrics_urls and settings.analysis.source == "direct":
        log.warning("gateway_metrics_urls is empty and analysis.source is direct: rollout "
                    "analysis has no gateway metrics (every measurement is inconclusive)")
    # Off the event loop: a leader's lease is renewed on it, and migrations on a large
    # database can outlast the lease (it would lapse mid-migration, and a standby lead).
    sessions = await asyncio.to_thread(prepare_database, settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    async with running_fleet(settings, sessions, snapshots) as fleet:
        app = FastAPI(title="Inferplane control plane")
        app.state.backend_allowlist = allowlist(settings)
        install_auth(app, gateway_settings(settings), snapshots)
        registry = CollectorRegistry()
        fleet.health.export_to(registry)
        controller = mount_control_plane(
            app, sessions, snapshots, registry, fleet.tiers,
            lambda slo: RolloutController(sessions, analysis_source(settings, gateway_metrics_urls,
                                                                    registry),
                                          on_registry_change(snapshots), slo=slo,
                                          registry=registry, tick_s=settings.rollout_tick_s))
        mount_console(app)
        app.mount("/metrics", make_asgi_app(registry))
        fleet.run(controller.run())
        if (mlflow_loop := mlflow_sync(settings, app, sessions, snapshots)) is not None:
            fleet.run(mlflow_loop)
        async with (usage_from_workers(sessions, settings) if workers_usage
                    else contextlib.nullcontext()):
            yield app


__all__ = ["allowlist", "analysis_source", "control_plane_app", "gateway_settings", "mlflow_sync",
           "mount_control_plane", "on_registry_change", "serve_gateway",
           "usage_from_gateway_workers", "usage_from_workers", "usage_spool", "usage_to_sql"]

"""Process entry points: `inferplane up` (embedded), `gateway`, `control-plane`."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import uvicorn

from control_plane.fleet import prepare_database, running_fleet, say
from control_plane.settings import Settings

log = logging.getLogger("inferplane")


def _gateway_settings(settings: Settings):
    return settings.gateway  # validated with the file, top-level routing/redis_url applied


def _on_registry_change(snapshots):
    def refresh() -> None:
        snapshots.refresh()
        snapshots.publish()
    return refresh


def _build_app(settings: Settings, sessions, snapshots, tiers):
    """Gateway + admin API + console in one app; returns it with the rollout controller that
    analyses this gateway's own per-version metrics. Cold models start through `tiers`."""
    from control_plane.console import mount_console
    from control_plane.rollouts import RolloutController
    from control_plane.rollouts.metrics_source import RegistryMetricsSource
    from control_plane.tiers.cold_starter import InProcessColdStarter
    from gateway.app import create_gateway_app

    app = create_gateway_app(_gateway_settings(settings), snapshots,
                             cold_starter=InProcessColdStarter(tiers, snapshots))
    app.state.backend_allowlist = _allowlist(settings)
    registry = app.state.gateway.metrics.registry
    controller = _mount_control_plane(app, sessions, snapshots, registry, tiers,
                                      lambda slo: RolloutController(
                                          sessions, RegistryMetricsSource(registry),
                                          _on_registry_change(snapshots), slo=slo,
                                          registry=registry, tick_s=settings.rollout_tick_s))
    mount_console(app)
    return app, controller


def _mount_control_plane(app, sessions, snapshots, registry, tiers, make_controller):
    from control_plane.admin import include_admin_routers
    from control_plane.slo import SloTracker
    from control_plane.tiers import build_tiers_router

    slo = SloTracker(sessions, registry=registry)
    include_admin_routers(app, sessions, snapshots, slo)
    app.include_router(build_tiers_router(tiers))
    return make_controller(slo)


def _mlflow_sync(settings: Settings, app, sessions, snapshots):
    """The optional MLflow Model Registry sync: its admin route now, its loop as a coroutine."""
    if settings.mlflow is None:
        return None
    from control_plane.mlflow_api import build_mlflow_router
    from registry.mlflow_sync import MlflowSync

    sync = MlflowSync(sessions, settings.mlflow.tracking_uri, prefix=settings.mlflow.prefix)
    app.include_router(build_mlflow_router(sync, snapshots))
    return sync.run(settings.mlflow.interval_s, settings.mlflow.direction)



@contextlib.asynccontextmanager
async def _usage_to_sql(app, sessions):
    """Usage rows flow from the gateway to SQL in batches; the last batch is flushed on exit."""
    from control_plane.usage_sink import sql_usage_writer

    writer = sql_usage_writer(sessions)
    await writer.start()
    app.state.gateway.usage_sinks.append(writer.record)
    try:
        yield writer
    finally:
        await writer.close()


def _server(app, settings: Settings) -> uvicorn.Server:
    from common.connections import uvicorn_config

    config = uvicorn_config(app, settings.server.limits(), host=settings.host, port=settings.port,
                            log_level="warning", loop="none", lifespan="on",
                            timeout_graceful_shutdown=10)
    return uvicorn.Server(config)


def _listen(settings: Settings, count: int = 1):
    """The server's sockets (`count` of them, one per gateway worker), bound before anything
    loads; None (after saying why) when the port is taken, so no engine starts and nothing
    claims to be ready."""
    from common.connections import PortInUse, listen_sockets

    try:
        return listen_sockets(settings.host, settings.port, count)
    except (PortInUse, ValueError) as exc:
        say(f"error: {exc}")
        return None


def _allowlist(settings: Settings):
    from control_plane.backend_allowlist import BackendAllowlist

    return BackendAllowlist.from_networks(settings.backends.allowed_networks)


def _engine_keys(settings: Settings, create: bool) -> None:
    """Every process that starts or calls builtin engines derives their keys from one secret."""
    from engine_adapter import engine_keys

    engine_keys.configure(settings.engine_secret
                          or engine_keys.load_secret(settings.data_dir, create=create))


async def _up(settings: Settings, sock) -> None:
    from control_plane.snapshots import SnapshotSource

    _engine_keys(settings, create=True)
    sessions = prepare_database(settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    async with running_fleet(settings, sessions, snapshots) as fleet:
        app, controller = _build_app(settings, sessions, snapshots, fleet.tiers)
        fleet.health.export_to(app.state.gateway.metrics.registry)
        fleet.run(controller.run())
        if (mlflow_loop := _mlflow_sync(settings, app, sessions, snapshots)) is not None:
            fleet.run(mlflow_loop)
        async with _usage_to_sql(app, sessions):
            say(f"ready: OpenAI API at http://{settings.host}:{settings.port}/v1, admin API at "
                f"/admin/v1, console at /console, metrics at /metrics (Ctrl-C stops everything)")
            await _server(app, settings).serve(sockets=[sock])


def _configure_logging() -> None:
    from common.logging_setup import configure_logging

    configure_logging("INFO")  # one JSON handler; the gateway app re-applies its own settings
    for noisy in ("httpx", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run(main) -> int:
    _configure_logging()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    # SIGTERM (Kubernetes stopping a pod) takes the Ctrl-C path: uvicorn drains in-flight
    # requests, then re-raises the signal; by default that would kill the process before the
    # last usage batch is flushed and the engines are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main)
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def run_up(settings: Settings, workers: int = 1) -> int:
    if workers > 1:   # the gateway in N processes, the control plane in this one
        from control_plane.up_workers import run_up_workers
        return run_up_workers(settings, workers)
    socks = _listen(settings)
    return 1 if socks is None else _run(_up(settings, socks[0]))


async def _gateway(settings: Settings, sock, link=None) -> None:
    """One gateway process; with `link` (an up_workers.ControlPlaneLink) a worker of `up`."""
    from control_plane.snapshots import SnapshotSource
    from registry.db import make_session_factory

    if link is not None:   # the registry exists once the control plane answers
        await link.wait_ready()
    # Replicas read the registry the control plane migrates and writes; they never change it.
    _engine_keys(settings, create=False)
    sessions = make_session_factory(settings.resolved_database_url())
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    snapshots.refresh()
    task = asyncio.create_task(snapshots.run())
    try:
        from gateway.app import create_gateway_app
        cold_starter = link.cold_starter(snapshots) if link is not None else None
        app = create_gateway_app(_gateway_settings(settings), snapshots, cold_starter=cold_starter)
        front = link.front(app, cold_starter) if link is not None else contextlib.nullcontext(app)
        async with _usage_to_sql(app, sessions), front as served:
            await _server(served, settings).serve(sockets=[sock])
    finally:
        task.cancel()


def run_gateway(settings: Settings, workers: int = 1) -> int:
    socks = _listen(settings, workers)
    if socks is None:
        return 1
    if workers > 1:   # limits stay exact: in Redis, or in one store the supervisor serves
        from common.workers import serve_workers
        from gateway.limits.shared import limits_store
        return serve_workers(socks, lambda sock: _run(_gateway(settings, sock)),
                             None if settings.redis_url else limits_store())
    return _run(_gateway(settings, socks[0]))


def _gateway_metrics(urls: list[str], registry):
    """Rollout analysis reads the gateways' own metrics; without their URLs every measurement
    is inconclusive and rollouts pause for an operator."""
    from control_plane.rollouts.metrics_source import MetricsSource, RegistryMetricsSource

    if urls:
        return MetricsSource(urls)
    log.warning("gateway_metrics_urls is empty: rollout analysis has no gateway metrics")
    return RegistryMetricsSource(registry)


async def _control_plane(settings: Settings, sock) -> None:
    from control_plane.leader import LeaderLock

    leader = LeaderLock(settings.resolved_database_url())
    await leader.acquire(on_wait=lambda: say("standby: another control plane leads"))
    server = asyncio.create_task(_lead_control_plane(settings, sock))
    lost = asyncio.create_task(leader.hold())
    try:
        done, _ = await asyncio.wait({server, lost}, return_when=asyncio.FIRST_COMPLETED)
        if lost in done:  # without the lock another control plane may lead: stop at once
            say("leadership lost: stopping")
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
            raise SystemExit(3)
        server.result()
    finally:
        lost.cancel()
        leader.release()


async def _lead_control_plane(settings: Settings, sock) -> None:
    async with control_plane_app(settings, settings.gateway_metrics_urls) as app:
        await _server(app, settings).serve(sockets=[sock])


@contextlib.asynccontextmanager
async def control_plane_app(settings: Settings, gateway_metrics_urls: list[str]):
    """The control plane's app (admin API, console, /metrics) with its fleet and controllers
    running until the block exits; rollouts analyse the gateways at `gateway_metrics_urls`."""
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry, make_asgi_app

    from common.auth.authenticate import install_auth
    from control_plane.console import mount_console
    from control_plane.rollouts import RolloutController
    from control_plane.snapshots import SnapshotSource

    _engine_keys(settings, create=True)
    sessions = prepare_database(settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    async with running_fleet(settings, sessions, snapshots) as fleet:
        app = FastAPI(title="Inferplane control plane")
        app.state.backend_allowlist = _allowlist(settings)
        install_auth(app, _gateway_settings(settings), snapshots)
        registry = CollectorRegistry()
        fleet.health.export_to(registry)
        controller = _mount_control_plane(
            app, sessions, snapshots, registry, fleet.tiers,
            lambda slo: RolloutController(sessions, _gateway_metrics(gateway_metrics_urls,
                                                                     registry),
                                          _on_registry_change(snapshots), slo=slo,
                                          registry=registry, tick_s=settings.rollout_tick_s))
        mount_console(app)
        app.mount("/metrics", make_asgi_app(registry))
        fleet.run(controller.run())
        if (mlflow_loop := _mlflow_sync(settings, app, sessions, snapshots)) is not None:
            fleet.run(mlflow_loop)
        yield app


def run_control_plane(settings: Settings) -> int:
    socks = _listen(settings)
    return 1 if socks is None else _run(_control_plane(settings, socks[0]))

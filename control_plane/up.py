"""Process entry points: `inferplane up` (embedded), `gateway`, `control-plane`."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path

import uvicorn

from .settings import Settings

log = logging.getLogger("inferplane")


def _say(message: str) -> None:
    print(f"[inferplane] {message}", file=sys.stderr, flush=True)


def _gateway_settings(settings: Settings):
    from gateway.settings import GatewaySettings

    return GatewaySettings(**settings.gateway_settings_dict())


def _prepare_database(settings: Settings):
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url()
    upgrade(url, progress=lambda msg: _say(f"migrations: {msg}"))
    return make_session_factory(url)


def _on_registry_change(snapshots):
    def refresh() -> None:
        snapshots.refresh()
        snapshots.publish()
    return refresh


def _build_app(settings: Settings, sessions, snapshots, tiers):
    """Gateway + admin API + console in one app; returns it with the rollout controller that
    analyses this gateway's own per-version metrics. Cold models start through `tiers`."""
    from gateway.app import create_gateway_app
    from gateway.coldstart import InProcessColdStarter

    from .console import mount_console
    from .rollouts import RolloutController
    from .rollouts.metrics_source import RegistryMetricsSource

    app = create_gateway_app(_gateway_settings(settings), snapshots)
    app.state.gateway.cold_starter = InProcessColdStarter(tiers, snapshots)
    registry = app.state.gateway.metrics.registry
    controller = _mount_control_plane(app, sessions, snapshots, registry, tiers,
                                      lambda slo: RolloutController(
                                          sessions, RegistryMetricsSource(registry),
                                          _on_registry_change(snapshots), slo=slo,
                                          registry=registry, tick_s=settings.rollout_tick_s))
    mount_console(app)
    return app, controller


def _mount_control_plane(app, sessions, snapshots, registry, tiers, make_controller):
    from .admin import include_admin_routers
    from .slo import SloTracker
    from .tiers import build_tiers_router

    slo = SloTracker(sessions, registry=registry)
    include_admin_routers(app, sessions, snapshots, slo)
    app.include_router(build_tiers_router(tiers))
    return make_controller(slo)


def _mlflow_sync(settings: Settings, app, sessions, snapshots):
    """The optional MLflow Model Registry sync: its admin route now, its loop as a coroutine."""
    if settings.mlflow is None:
        return None
    from registry.mlflow_sync import MlflowSync

    from .mlflow_api import build_mlflow_router

    sync = MlflowSync(sessions, settings.mlflow.tracking_uri, prefix=settings.mlflow.prefix)
    app.include_router(build_mlflow_router(sync, snapshots))
    return sync.run(settings.mlflow.interval_s, settings.mlflow.direction)


def _tier_manager(settings: Settings, sessions, snapshots, supervisor):
    from .tiers import TierManager, tier_config_from_settings

    return TierManager(sessions, supervisor, snapshots.refresh,
                       tier_config_from_settings(settings, **settings.tiers))


@contextlib.asynccontextmanager
async def _usage_to_sql(app, sessions):
    """Usage rows flow from the gateway to SQL in batches; the last batch is flushed on exit."""
    from .usage_sink import sql_usage_writer

    writer = sql_usage_writer(sessions)
    await writer.start()
    app.state.gateway.usage_sinks.append(writer.record)
    try:
        yield writer
    finally:
        await writer.close()


def _server(app, settings: Settings) -> uvicorn.Server:
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                            http="httptools", loop="none", lifespan="on",
                            timeout_graceful_shutdown=10)
    return uvicorn.Server(config)


async def _up(settings: Settings) -> None:
    from .bootstrap import ensure_admin_key, register_models, set_backend_state
    from .health import HealthProber
    from .snapshots import SnapshotSource
    from .supervisor import EngineSupervisor

    sessions = _prepare_database(settings)
    secret, created = ensure_admin_key(sessions, Path(settings.data_dir))
    if created:
        _say(f"admin key (shown once, also in {Path(settings.data_dir) / 'admin.key'}): {secret}")
    engines = register_models(sessions, settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)

    async def on_state(spec, state):
        if await asyncio.to_thread(set_backend_state, sessions, spec.url, state):
            snapshots.refresh()
        await tiers.on_engine_state(spec, state)

    supervisor = EngineSupervisor(on_state=on_state, ready_timeout_s=settings.engine_ready_timeout_s)
    tiers = _tier_manager(settings, sessions, snapshots, supervisor)
    background: list[asyncio.Task] = []
    try:
        if engines:
            _say(f"starting {len(engines)} builtin engine(s): "
                 + ", ".join(f"{e.name} on :{e.port}" for e in engines))
        await asyncio.gather(*(supervisor.start(spec) for spec in engines))
        snapshots.refresh()
        background.append(asyncio.create_task(snapshots.run()))
        background.append(asyncio.create_task(
            HealthProber(sessions, on_change=snapshots.refresh).run()))
        app, controller = _build_app(settings, sessions, snapshots, tiers)
        background += [asyncio.create_task(controller.run()), asyncio.create_task(tiers.run())]
        if (mlflow_loop := _mlflow_sync(settings, app, sessions, snapshots)) is not None:
            background.append(asyncio.create_task(mlflow_loop))
        async with _usage_to_sql(app, sessions):
            _say(f"ready: OpenAI API at http://{settings.host}:{settings.port}/v1, admin API at "
                 f"/admin/v1, console at /console, metrics at /metrics (Ctrl-C stops everything)")
            await _server(app, settings).serve()
    finally:
        for task in background:
            task.cancel()
        _say("stopping engines")
        await tiers.shutdown()
        await supervisor.stop_all()


def _run(main) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main)
    return 0


def run_up(settings: Settings) -> int:
    return _run(_up(settings))


async def _gateway(settings: Settings) -> None:
    from .snapshots import SnapshotSource

    sessions = _prepare_database(settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    snapshots.refresh()
    task = asyncio.create_task(snapshots.run())
    try:
        from gateway.app import create_gateway_app
        app = create_gateway_app(_gateway_settings(settings), snapshots)
        async with _usage_to_sql(app, sessions):
            await _server(app, settings).serve()
    finally:
        task.cancel()


def run_gateway(settings: Settings, workers: int = 1) -> int:
    if workers > 1:
        _say("run one process per replica (e.g. several `inferplane gateway` behind a balancer)")
    return _run(_gateway(settings))


def _gateway_metrics(settings: Settings, registry):
    """Rollout analysis reads the gateways' own metrics; without their URLs every measurement
    is inconclusive and rollouts pause for an operator."""
    from .rollouts.metrics_source import MetricsSource, RegistryMetricsSource

    if settings.gateway_metrics_urls:
        return MetricsSource(settings.gateway_metrics_urls)
    log.warning("gateway_metrics_urls is empty: rollout analysis has no gateway metrics")
    return RegistryMetricsSource(registry)


async def _control_plane(settings: Settings) -> None:
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry, make_asgi_app

    from .console import mount_console
    from .health import HealthProber
    from .rollouts import RolloutController
    from .snapshots import SnapshotSource
    from .supervisor import EngineSupervisor

    sessions = _prepare_database(settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    snapshots.refresh()
    app = FastAPI(title="Inferplane control plane")
    registry = CollectorRegistry()
    supervisor = EngineSupervisor(ready_timeout_s=settings.engine_ready_timeout_s)
    tiers = _tier_manager(settings, sessions, snapshots, supervisor)
    controller = _mount_control_plane(
        app, sessions, snapshots, registry, tiers,
        lambda slo: RolloutController(sessions, _gateway_metrics(settings, registry),
                                      _on_registry_change(snapshots), slo=slo, registry=registry,
                                      tick_s=settings.rollout_tick_s))
    mount_console(app)
    app.mount("/metrics", make_asgi_app(registry))
    mlflow_loop = _mlflow_sync(settings, app, sessions, snapshots)
    tasks = [asyncio.create_task(snapshots.run()), asyncio.create_task(controller.run()),
             asyncio.create_task(tiers.run()),
             asyncio.create_task(HealthProber(sessions, on_change=snapshots.refresh).run())]
    if mlflow_loop is not None:
        tasks.append(asyncio.create_task(mlflow_loop))
    try:
        await _server(app, settings).serve()
    finally:
        for task in tasks:
            task.cancel()
        await tiers.shutdown()
        await supervisor.stop_all()


def run_control_plane(settings: Settings) -> int:
    return _run(_control_plane(settings))

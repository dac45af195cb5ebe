"""Process entry points: `inferplane up` (embedded), `gateway`, `control-plane`.

The apps they serve are assembled in control_plane.apps, the process around them (logging,
sockets, the event loop) is control_plane.server_process; `up --workers N` is
control_plane.up_workers."""
from __future__ import annotations

import asyncio

from control_plane.apps import (allowlist, analysis_source, control_plane_app, gateway_settings,
                                 mlflow_sync, mount_control_plane, on_registry_change,
                                 serve_gateway, usage_from_gateway_workers, usage_to_sql)
from control_plane.fleet import prepare_database, running_fleet, say
from control_plane.server_process import configure_engine_keys, listen, run, uvicorn_server
from control_plane.settings import Settings


def _build_app(settings: Settings, sessions, snapshots, tiers):
    """Gateway + admin API + console in one app; returns it with the rollout controller that
    analyses this gateway's own per-version metrics. Cold models start through `tiers`."""
    from control_plane.console import mount_console
    from control_plane.rollouts import RolloutController
    from control_plane.tiers.cold_starter import InProcessColdStarter
    from gateway.app import create_gateway_app

    app = create_gateway_app(gateway_settings(settings), snapshots,
                             cold_starter=InProcessColdStarter(tiers, snapshots),
                             sessions=sessions)
    app.state.backend_allowlist = allowlist(settings)
    registry = app.state.gateway.metrics.registry
    controller = mount_control_plane(app, sessions, snapshots, registry, tiers,
                                     lambda slo: RolloutController(
                                         sessions, analysis_source(settings, [], registry),
                                         on_registry_change(snapshots), slo=slo,
                                         registry=registry, tick_s=settings.rollout_tick_s))
    mount_console(app)
    return app, controller


async def _up(settings: Settings, sock) -> None:
    from control_plane.snapshots import SnapshotSource

    configure_engine_keys(settings, create=True)
    sessions = prepare_database(settings)
    snapshots = SnapshotSource(sessions, redis_url=settings.redis_url)
    async with running_fleet(settings, sessions, snapshots) as fleet:
        app, controller = _build_app(settings, sessions, snapshots, fleet.tiers)
        fleet.health.export_to(app.state.gateway.metrics.registry)
        fleet.run(controller.run())
        if (mlflow_loop := mlflow_sync(settings, app, sessions, snapshots)) is not None:
            fleet.run(mlflow_loop)
        async with usage_to_sql(app, sessions, settings):
            say(f"ready: OpenAI API at http://{settings.host}:{settings.port}/v1, admin API at "
                f"/admin/v1, console at /console, metrics at /metrics (Ctrl-C stops everything)")
            await uvicorn_server(app, settings).serve(sockets=[sock])


def run_up(settings: Settings, workers: int = 1) -> int:
    if workers > 1:   # the gateway in N processes, the control plane in this one
        from control_plane.up_workers import run_up_workers
        return run_up_workers(settings, workers)
    socks = listen(settings)
    return 1 if socks is None else run(_up(settings, socks[0]))


def run_gateway(settings: Settings, workers: int = 1) -> int:
    socks = listen(settings, workers)
    if socks is None:
        return 1
    if workers > 1:   # limits stay exact: in Redis, or in one store the supervisor serves
        from common.workers import serve_workers
        from gateway.limits.shared import limits_store
        return serve_workers(socks,
                             lambda sock: run(serve_gateway(settings, sock, hand_off_usage=True)),
                             None if settings.redis_url else limits_store(),
                             alongside=lambda: usage_from_gateway_workers(settings))
    return run(serve_gateway(settings, socks[0]))


async def _control_plane(settings: Settings, sock) -> None:
    from control_plane.leadership.election import leader_for

    leader = leader_for(settings)
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
        await leader.release()


async def _lead_control_plane(settings: Settings, sock) -> None:
    async with control_plane_app(settings, settings.gateway_metrics_urls) as app:
        await uvicorn_server(app, settings).serve(sockets=[sock])


def run_control_plane(settings: Settings) -> int:
    socks = listen(settings)
    return 1 if socks is None else run(_control_plane(settings, socks[0]))

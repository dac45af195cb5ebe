"""The gateway ASGI app: OpenAI routes, health, /metrics. The control plane mounts its admin
routers on the same app (auth dependencies: common.auth.authenticate.authenticate / require_role)."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from common.errors import install_error_handlers
from common.logging_setup import configure_logging
from common.openapi_doc import install_openapi
from common.request_context import RequestContextMiddleware
from common.tracing import configure_from_settings
from gateway.apis.anthropic import router as messages
from gateway.apis.batches import router as batches
from gateway.apis.chat import router as chat
from gateway.apis.completions import router as completions
from gateway.apis.embeddings import router as embeddings
from gateway.apis.files import router as files
from gateway.apis.health import router as health
from gateway.apis.models import router as models
from gateway.apis.responses import router as responses
from gateway.batch.runner import BatchRunner
from gateway.batch.store import BatchStore
from gateway.request_path.fast_lane import GatewayApp
from gateway.request_path.json_response import OrjsonResponse
from gateway.routing.load_poll import poll_engine_load
from gateway.services import GatewayServices, build_services
from gateway.settings import GatewaySettings

log = logging.getLogger("inferplane.gateway")
# FastAPI releases with built-in OpenTelemetry would add a second server span per request
# (RequestContextMiddleware makes the gateway's, with request ids) and ignore our provider;
# their metrics and logs would look providers up on every request for nothing.
_NATIVE_TELEMETRY_OFF = {"telemetry": {"tracing": False, "metrics": False, "logs": False}} \
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}


def _lifespan(state: GatewayServices):
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.tasks.append(asyncio.create_task(state.metrics.loop.run(), name="loop-monitor"))
        if state.settings.routing.load_poll_interval_s > 0:
            state.tasks.append(asyncio.create_task(poll_engine_load(state), name="load-poller"))
        if (runner := getattr(app.state, "batch_runner", None)) is not None:
            state.tasks.append(asyncio.create_task(runner.run(), name="batch-runner"))
        if state.settings.gc_freeze:
            # Everything alive after start-up (modules, routes, models, metrics) lives for the
            # whole process: out of the collector's sight, full collections stop walking it
            # and stop showing up as latency spikes in the tail.
            gc.collect()
            gc.freeze()
        try:
            yield
        finally:
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            await state.shadow.close()
            await state.limits.close()
            await state.cache.close()
            await state.adapters.aclose()
    return lifespan


def create_gateway_app(settings: GatewaySettings, snapshot_source,
                       cold_starter=None, sessions=None) -> FastAPI:
    """`cold_starter` (gateway.traffic.coldstart.ColdStarter): starts cold models on demand;
    `sessions` (registry.db.make_session_factory): the registry database the Files and Batch
    APIs keep their rows in (without it they are not served), and where batches are run from."""
    if settings.log_json:
        configure_logging(settings.log_level, log_prompts=settings.log_prompts)
    configure_from_settings(settings.tracing)
    state = build_services(settings, snapshot_source, cold_starter=cold_starter)
    app = GatewayApp(title="Inferplane", default_response_class=OrjsonResponse,
                     lifespan=_lifespan(state), **_NATIVE_TELEMETRY_OFF)
    app.state.gateway = state
    app.state.snapshot_source = snapshot_source
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(RequestContextMiddleware)
    for module in (chat, completions, embeddings, models, health, responses, messages):
        app.include_router(module.router)
    if sessions is not None:
        app.state.batch_store = BatchStore(sessions)
        app.include_router(files.router)
        app.include_router(batches.router)
        if settings.batches.runner:
            app.state.batch_runner = BatchRunner(app, app.state.batch_store, settings.batches)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        state.metrics.follow(state.snapshot, state.router.strategy_name)
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

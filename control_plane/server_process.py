"""What every server process (`up`, `up --workers` and its gateway workers, `gateway`,
`control-plane`) does around the app it serves:

    configure_logging()                           # one JSON handler, quiet HTTP clients
    configure_engine_keys(settings, create=True)  # builtin engines' keys from one secret
    socks = listen(settings, count)               # bound first; None when the port is taken
    server = uvicorn_server(app, settings)        # serve(sockets=[sock]) on the bound socket
    rc = run(main())                              # the event loop; SIGTERM stops as Ctrl-C
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import uvicorn

from control_plane.fleet import say
from control_plane.settings import Settings


def uvicorn_server(app, settings: Settings) -> uvicorn.Server:
    from dataclasses import replace

    from common.connections import uvicorn_config

    # uploads (POST /v1/files) up to the Files API's own cap, which answers past it
    files_cap = settings.gateway.batches.max_file_bytes + 64 * 1024
    limits = replace(settings.server.limits(), upload_limits=(("/v1/files", files_cap),))
    config = uvicorn_config(app, limits, host=settings.host, port=settings.port,
                            log_level="warning", loop="none", lifespan="on",
                            timeout_graceful_shutdown=10)
    return uvicorn.Server(config)


def listen(settings: Settings, count: int = 1):
    """The server's sockets (`count` of them, one per gateway worker), bound before anything
    loads; None (after saying why) when the port is taken, so no engine starts and nothing
    claims to be ready."""
    from common.connections import PortInUse, listen_sockets

    try:
        return listen_sockets(settings.host, settings.port, count)
    except (PortInUse, ValueError) as exc:
        say(f"error: {exc}")
        return None


def configure_engine_keys(settings: Settings, create: bool) -> None:
    """Every process that starts or calls builtin engines derives their keys from one secret."""
    from engine_adapter import engine_keys

    engine_keys.configure(settings.engine_secret
                          or engine_keys.load_secret(settings.data_dir, create=create))


def configure_logging() -> None:
    from common.logging_setup import configure_logging as configure_json_logging

    configure_json_logging("INFO")  # one JSON handler; the gateway app re-applies its own settings
    for noisy in ("httpx", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run(main) -> int:
    configure_logging()
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


__all__ = ["configure_engine_keys", "configure_logging", "listen", "run", "uvicorn_server"]

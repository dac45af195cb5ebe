"""`inferplane up --workers N`: the embedded quickstart with N gateway worker processes.

    rc = run_up_workers(settings, workers=4)

Process tree (every fork happens in a process that has no event loop, thread, database
connection or engine yet, so no child inherits a lock held mid-use or a shared connection):

    inferplane up            control plane: admin API, console, registry, tiers, rollouts,
    |                        engine supervisor, on a private unix socket (control.sock)
    +- worker supervisor     forked first; common.workers.serve_workers: the shared limits
    |  +- gateway worker     and budget store, merged metrics, a dead worker replaced
    |  +- gateway worker ... each accepts on the public port, as `inferplane gateway` does
    +- builtin engines

A worker waits until the control plane answers (registry migrated, admin key written, hot
engines ready), then reads the registry through its own snapshot poller exactly as a
standalone gateway does; its request path never queries the database. Its usage records go
to its spool and are handed off (common.usage_handoff); the control plane alone writes them to
SQL (common.usage_collector), off the workers' interpreters. It forwards /admin/...
and /console... to the control plane, asks it to start cold models (HttpColdStarter), and
appends the control plane's metric families (engine health, SLOs, rollouts) to its /metrics
and its paths to /openapi.json.
The control plane analyses rollouts from the workers' merged /metrics on the public port.

SIGTERM or Ctrl-C: the control plane stops serving, stops the workers (each drains) and then
the engines; the worker supervisor ending on its own (workers that keep dying) stops it too.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from common.error_codes import ErrorCode
from control_plane.apps import control_plane_app, serve_gateway
from control_plane.fleet import say
from control_plane.server_process import (configure_engine_keys, configure_logging, listen, run,
                                          uvicorn_server)
from control_plane.settings import Settings

CONTROL_BASE = "http://control-plane"     # the host name is ignored on a unix socket
FORWARDED = ("/admin/", "/console")        # path prefixes the control plane serves
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te",
                        b"upgrade", b"proxy-connection", b"trailer"})
READY_POLL_S = 0.1
STOP_WORKERS_S = 30.0   # the workers' graceful shutdown is 10 s; then they are killed


@dataclass(frozen=True)
class ControlPlaneLink:
    """How a worker reaches the control plane of its `up`: a unix socket and the admin key."""

    socket_path: str
    data_dir: Path

    def client(self, timeout: httpx.Timeout | float = 30.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.socket_path),
                                 base_url=CONTROL_BASE, timeout=timeout, trust_env=False)

    async def wait_ready(self) -> None:
        """Until the control plane answers /healthz (it may be loading models for minutes)."""
        async with self.client(timeout=5.0) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/healthz")).status_code == 200:
                        return
                await asyncio.sleep(READY_POLL_S)

    def admin_key(self) -> str:
        """The key the control plane was started with (written before it answers)."""
        return os.environ.get("INFERPLANE_ADMIN_KEY") or \
            (self.data_dir / "admin.key").read_text().strip()

    def cold_starter(self, snapshots):
        from gateway.traffic.coldstart import HttpColdStarter

        return HttpColdStarter(CONTROL_BASE, self.admin_key(), snapshots,
                               client=self.client(httpx.Timeout(70.0, connect=5.0)))

    @contextlib.asynccontextmanager
    async def front(self, app, cold_starter):
        """`app` behind the forwarding routes, with the cold starter's activity reports."""
        flush = asyncio.create_task(cold_starter.run())
        client = self.client()
        try:
            yield ControlPlaneRoutes(app, client)
        finally:
            flush.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flush
            await cold_starter.flush()   # the last request counts keep the tiers' idle timers
            await cold_starter.aclose()
            await client.aclose()


class ControlPlaneRoutes:
    """ASGI: admin and console paths go to the control plane, /metrics and /openapi.json
    merge both, everything else goes to `app`.

        app = ControlPlaneRoutes(gateway_app, link.client())
    """

    def __init__(self, app, client: httpx.AsyncClient) -> None:
        self.app, self.client = app, client

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if scope["path"].startswith(FORWARDED):
                return await self._forward(scope, receive, send)
            if scope["path"] == "/metrics":
                return await self._metrics(scope, receive, send)
            if scope["path"] == "/openapi.json":
                return await self._openapi(scope, receive, send)
        await self.app(scope, receive, send)

    async def _forward(self, scope, receive, send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        query = scope.get("query_string", b"")
        url = scope["path"] + (f"?{query.decode('latin-1')}" if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
        request = self.client.build_request(scope["method"], url, headers=headers,
                                            content=bytes(body))
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return await _unavailable(exc)(scope, receive, send)
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw
                                    if k.lower() not in HOP_BY_HOP]})
            async for chunk in response.aiter_raw():   # as sent: encodings pass through
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _metrics(self, scope, receive, send) -> None:
        """The workers' merged families, then the control plane's (distinct names)."""
        try:
            response = await self.client.get("/metrics/")   # a mounted app
            extra = response.content if response.status_code == 200 else b""
        except httpx.HTTPError:   # the gateway's own figures still come back
            extra = b""

        async def send_with_extra(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [(k, v) for k, v in message["headers"]
                                                  if k.lower() != b"content-length"]}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                message = {**message, "body": message.get("body", b"") + extra}
            await send(message)
        await self.app(scope, receive, send_with_extra)


    async def _openapi(self, scope, receive, send) -> None:
        """One document for both: the gateway's paths and the control plane's."""
        from fastapi.responses import JSONResponse

        doc = copy.deepcopy(self.app.openapi())
        try:
            response = await self.client.get("/openapi.json")
            theirs = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            theirs = {}
        doc["paths"].update(theirs.get("paths", {}))
        for section, entries in theirs.get("components", {}).items():
            doc.setdefault("components", {}).setdefault(section, {}).update(entries)
        await JSONResponse(doc)(scope, receive, send)


def _unavailable(exc: Exception):
    from common.errors import InferplaneError

    return InferplaneError(f"the control plane is not answering: {exc}", status=503,
                           code=ErrorCode.CONTROL_PLANE_UNAVAILABLE).response()


def run_up_workers(settings: Settings, workers: int) -> int:
    """Bind the public port, fork the worker supervisor, then run the control plane here."""
    socks = listen(settings, workers)
    if socks is None:
        return 1
    configure_logging()
    configure_engine_keys(settings, create=True)   # a file: the workers inherit the secret
    run_dir = tempfile.mkdtemp(prefix="inferplane-up-")
    link = ControlPlaneLink(str(Path(run_dir) / "control.sock"), Path(settings.data_dir))
    pid = os.fork()
    if pid == 0:
        from common.workers import serve_workers
        from gateway.limits.shared import limits_store

        code = 1
        try:
            code = serve_workers(socks, lambda sock: run(serve_gateway(settings, sock, link)),
                                 None if settings.redis_url else limits_store(),
                                 replace=True)
        finally:
            os._exit(code)
    for sock in socks:   # only the workers accept on the public port
        sock.close()
    try:
        return run(_control_plane(settings, _unix_socket(link.socket_path), pid, workers))
    finally:
        _stop(pid)
        shutil.rmtree(run_dir, ignore_errors=True)


def _unix_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)   # this user's processes only; each admin request still needs a key
    sock.listen(1024)
    return sock


def _local_metrics_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "", None) else \
        "[::1]" if settings.host == "::" else settings.host
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{settings.port}/metrics"


async def _control_plane(settings: Settings, sock: socket.socket, supervisor: int,
                         workers: int) -> None:
    from common.workers import watch_exit

    urls = settings.gateway_metrics_urls or [_local_metrics_url(settings)]
    async with control_plane_app(settings, urls, workers_usage=True) as app:
        app.add_api_route("/healthz", _healthz, include_in_schema=False)
        server = uvicorn_server(app, settings)
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def supervisor_ended(code: int) -> None:   # the workers kept dying: stop it all
            exited.set_result(code)
            server.should_exit = True
        watch_exit(supervisor, supervisor_ended)
        say(f"ready: OpenAI API at http://{settings.host}:{settings.port}/v1 on {workers} "
            f"gateway workers, admin API at /admin/v1, console at /console, metrics at /metrics "
            f"(Ctrl-C stops everything)")
        try:
            await server.serve(sockets=[sock])
        finally:   # the workers drain their requests while the engines still run
            code = await _stop_supervisor(supervisor, exited)
        if code != 0:
            say(f"gateway workers stopped with status {code}: stopping")
            raise SystemExit(code)


async def _healthz() -> dict:
    return {"status": "ok"}


async def _stop_supervisor(pid: int, exited: asyncio.Future) -> int:
    """SIGTERM the worker supervisor (it stops its workers) and wait; kill them all if late."""
    if not exited.done():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        return await asyncio.wait_for(asyncio.shield(exited), STOP_WORKERS_S)
    except asyncio.TimeoutError:
        say("gateway workers did not stop in time: killing them")
        _kill_tree(pid)
        return await exited


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(child), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _stop(pid: int) -> None:
    """Last resort on the way out: the supervisor (and so its workers) must not outlive `up`."""
    with contextlib.suppress(ChildProcessError, ProcessLookupError):
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)

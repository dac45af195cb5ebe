"""Worker processes for one gateway: N forked processes accept on one listening socket.

    sock = listen_socket(host, port)                       # bound once, before the fork
    rc = serve_workers(4, lambda: serve_on(sock), shared_limits=redis_url is None)

The kernel hands each new connection to one of the workers waiting on the inherited socket,
so one gateway uses every core. Rate limits and budgets stay exact across the workers: with
Redis they already live there; without it (`shared_limits=True`) this supervising process
serves the one store every worker's limiter talks to (gateway.limits.shared), through a unix
socket bound before the fork so no worker can reach for it too early.

Metrics add up across the workers: the supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh
directory before the fork (gateway.metrics then writes every family there and /metrics on any
worker reads them all back), marks each ended worker dead there (its live gauges drop out)
and removes the directory on exit.

The supervisor forwards SIGTERM/SIGINT to the workers (each drains as one gateway does) and
stops the others when one exits on its own: a half-sized gateway that looks healthy is worse
than a restart by whatever runs it. It exits with the first non-zero worker status.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path
from typing import Callable

from prometheus_client import multiprocess, values

from gateway.limits.shared import SOCKET_ENV, LimitsOwner
from gateway.metrics import MULTIPROC_ENV

log = logging.getLogger("inferplane.gateway")


def serve_workers(workers: int, serve_one: Callable[[], int], shared_limits: bool) -> int:
    """Fork `workers` processes that each run `serve_one()`; supervise them until all exit."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    store_dir = tempfile.mkdtemp(prefix="inferplane-limits-") if shared_limits else None
    store_sock = _store_socket(store_dir) if store_dir else None
    metrics_dir = _shared_metrics_dir()
    pids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:   # the worker: never returns into the supervisor's code
            if store_sock is not None:
                store_sock.close()
            code = 1
            try:
                code = serve_one()
            finally:
                os._exit(code)
        pids.append(pid)
    try:
        return asyncio.run(_supervise(pids, store_sock))
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if store_dir:
            with contextlib.suppress(OSError):
                os.unlink(Path(store_dir) / "limits.sock")
                os.rmdir(store_dir)


def _shared_metrics_dir() -> str:
    """A fresh, empty directory for the workers' metric files (never a previous run's: its
    counters would be added to this one's), set in the environment the workers inherit."""
    path = tempfile.mkdtemp(prefix="inferplane-metrics-")
    os.environ[MULTIPROC_ENV] = path
    # prometheus_client picks its value storage from the environment when it is first imported,
    # which here was before the variable was set: pick again so the workers' families use files.
    values.ValueClass = values.get_value_class()
    return path


def _store_socket(store_dir: str) -> socket.socket:
    path = str(Path(store_dir) / "limits.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(256)
    os.environ[SOCKET_ENV] = path   # inherited by the workers: their limiters connect here
    return sock


async def _supervise(pids: list[int], store_sock: socket.socket | None) -> int:
    loop = asyncio.get_running_loop()
    owner = None
    if store_sock is not None:
        owner = LimitsOwner(store_sock.getsockname())
        await owner.start(sock=store_sock)
    exits: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for pid in pids:
        _watch(loop, pid, exits)
    stopping = False

    def stop(signum: int) -> None:
        nonlocal stopping
        stopping = True
        _signal_all(pids, signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    codes = []
    try:
        while len(codes) < len(pids):
            pid, code = await exits.get()
            codes.append(code)
            if not stopping:   # a worker ended by itself: end the gateway, not a part of it
                log.error("gateway worker %d exited with %d: stopping the others", pid, code)
                stopping = True
                _signal_all(pids, signal.SIGTERM)
    finally:
        if owner is not None:
            await owner.close()
    code = next((c for c in codes if c), 0)
    return code if code >= 0 else 128 - code   # killed by signal N: the shell's 128 + N


def _watch(loop: asyncio.AbstractEventLoop, pid: int, exits: asyncio.Queue) -> None:
    """Put (pid, exit status) on `exits` when the worker ends (a pidfd turns readable)."""
    fd = os.pidfd_open(pid)

    def reaped() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        multiprocess.mark_process_dead(pid)   # its in-flight and state gauges stop counting
        exits.put_nowait((pid, os.waitstatus_to_exitcode(status)))

    loop.add_reader(fd, reaped)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

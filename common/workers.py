"""Worker processes for one gateway: N forked processes, each accepting on its own socket.

    socks = listen_sockets(host, port, 4)                  # bound before the fork
    store = None if redis_url else limits_store()          # gateway.limits.shared
    rc = serve_workers(socks, serve_on, store)             # serve_on(sock) in each worker

The sockets are one SO_REUSEPORT group (common.connections.listen_sockets): the kernel
hands each new connection to one of them by a hash of the client's address, so a burst is
spread over the workers and one gateway uses every core. The supervisor keeps every socket
open, so connections that reach a dead worker's socket wait in its backlog for the worker
forked in its place. Rate limits and budgets stay exact across the workers: with
Redis they already live there; without it the caller passes a `SharedStore` (the gateway's
is gateway.limits.shared.limits_store()) and this supervising process serves the one store
every worker's limiter talks to, through a unix socket bound before the fork so no worker can
reach for it too early.

Metrics add up across the workers: the supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh
directory before the fork (gateway.observability.metrics then writes every family there and /metrics on any
worker reads them all back), marks each ended worker dead there (its live gauges drop out)
and removes the directory on exit.

The supervisor forwards SIGTERM/SIGINT to the workers (each drains as one gateway does). When
one exits on its own it stops the others (a half-sized gateway that looks healthy is worse
than a restart by whatever runs it), or with `replace=True` (`inferplane up --workers N`,
where stopping would stop the engines too) forks a new one in its place and logs the swap;
only after MAX_FAILED_STARTS replacements in a row that died within MIN_UPTIME_S does it stop
them all. It exits with the first non-zero worker status.
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Protocol, Sequence, TypeVar

from prometheus_client import multiprocess, values

from common.metric_values import file_values

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
METRICS_DIR_PREFIX = "inferplane-metrics-"   # each run's directory: <tmp>/<prefix>XXXX

log = logging.getLogger("inferplane.gateway")
MIN_UPTIME_S = 5.0       # a replaced worker that lived less than this failed to start
MAX_FAILED_STARTS = 3    # in a row: then the workers are stopped instead of replaced
L = TypeVar("L")         # what a worker serves on: its socket


class StoreOwner(Protocol):
    """The supervisor's side of a shared store: serves on a bound socket until closed."""
    async def start(self, sock: socket.socket) -> Any: ...
    async def close(self) -> Any: ...


@dataclass(frozen=True)
class SharedStore:
    """A store one supervisor serves to all its workers over a unix socket."""
    env: str                                   # tells a worker the socket's path
    owner: Callable[[str], StoreOwner]         # the owner serving on that path


def serve_workers(listeners: Sequence[L], serve_one: Callable[[L], int],
                  store: SharedStore | None, replace: bool = False,
                  alongside: Callable[[], AsyncContextManager] | None = None) -> int:
    """Fork one process per listener that runs `serve_one(listener)`; supervise them until all
    exit. With `replace`, a worker that dies is forked again on its listener (from this
    process, still clean). `alongside()` is an async context this process holds while the
    workers serve: entered once all are forked, left once the last has exited (the
    standalone gateway's writer of the usage its workers hand off)."""
    if not listeners:
        raise ValueError("serve_workers needs at least one listener")
    if replace and alongside is not None:   # a replacement would inherit its connections
        raise ValueError("serve_workers: `alongside` runs only where workers are not replaced")
    store_dir = tempfile.mkdtemp(prefix="inferplane-limits-") if store else None
    store_sock = _store_socket(store_dir, store.env) if store else None
    metrics_dir = _shared_metrics_dir()
    pids = {_fork(serve_one, store_sock, listener): listener for listener in listeners}

    def spawn(ended: int) -> int:
        listener = pids.pop(ended)
        new = _fork(serve_one, store_sock, listener)
        pids[new] = listener
        return new
    try:
        return asyncio.run(_supervise(list(pids), store, store_sock, spawn if replace else None,
                                      alongside))
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if store_dir:
            with contextlib.suppress(OSError):
                os.unlink(Path(store_dir) / "limits.sock")
                os.rmdir(store_dir)


def _fork(serve_one: Callable[[L], int], store_sock: socket.socket | None, listener: L) -> int:
    """One worker; in the child `serve_one(listener)` runs and the process exits with its
    status."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:   # the worker: never returns into the supervisor's code
        # A replacement is forked from inside the supervisor's event loop: its signal
        # handlers and wakeup fd would send this worker's signals to the supervisor's loop.
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if store_sock is not None:
            store_sock.close()
        code = serve_one(listener)
    finally:
        os._exit(code)


def _shared_metrics_dir() -> str:
    """A fresh, empty directory for the workers' metric files (never a previous run's: its
    counters would be added to this one's), set in the environment the workers inherit."""
    path = tempfile.mkdtemp(prefix=METRICS_DIR_PREFIX)
    os.environ[MULTIPROC_ENV] = path
    # prometheus_client picks its value storage from the environment when it is first imported,
    # which here was before the variable was set: pick again so the workers' families use files.
    # common.metric_values: the same files, with less work an update (~12 a request).
    values.ValueClass = file_values()
    return path


def _store_socket(store_dir: str, env: str) -> socket.socket:
    path = str(Path(store_dir) / "limits.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(256)
    os.environ[env] = path   # inherited by the workers: their clients connect here
    return sock


async def _supervise(pids: list[int], store: SharedStore | None, store_sock: socket.socket | None,
                     spawn: Callable[[int], int] | None = None,
                     alongside: Callable[[], AsyncContextManager] | None = None) -> int:
    owner = None
    if store is not None and store_sock is not None:
        owner = store.owner(store_sock.getsockname())
        await owner.start(sock=store_sock)
    try:
        async with alongside() if alongside is not None else contextlib.nullcontext():
            return await _watch_workers(pids, spawn)
    finally:
        if owner is not None:
            await owner.close()


async def _watch_workers(pids: list[int], spawn: Callable[[int], int] | None) -> int:
    exits: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    live = {pid: time.monotonic() for pid in pids}   # pid -> when it was started
    for pid in pids:
        watch_exit(pid, lambda code, pid=pid: exits.put_nowait((pid, code)))
    stopping, failed_starts = False, 0

    def stop(signum: int) -> None:
        nonlocal stopping
        stopping = True
        _signal_all(list(live), signal.SIGTERM)

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    codes = []
    while live:
        pid, code = await exits.get()
        short_lived = time.monotonic() - live.pop(pid) < MIN_UPTIME_S
        if stopping:
            codes.append(code)
            continue
        # A worker that keeps dying at start would be forked forever: give up after a few.
        failed_starts = failed_starts + 1 if short_lived else 0
        if spawn is not None and failed_starts < MAX_FAILED_STARTS:
            new = spawn(pid)
            live[new] = time.monotonic()
            watch_exit(new, lambda code, pid=new: exits.put_nowait((pid, code)))
            log.error("gateway worker %d exited with %d: started worker %d in its place",
                      pid, code, new)
            continue
        # A worker ended by itself: end the gateway, not a part of it.
        log.error("gateway worker %d exited with %d: stopping the others", pid, code)
        codes.append(code)
        stopping = True
        _signal_all(list(live), signal.SIGTERM)
    code = next((c for c in codes if c), 0)
    return code if code >= 0 else 128 - code   # killed by signal N: the shell's 128 + N


def watch_exit(pid: int, on_exit: Callable[[int], None]) -> None:
    """On the running loop, reap child `pid` when it ends (a pidfd turns readable) and call
    `on_exit(exit code)` (negative: killed by that signal). Its metric files stop counting."""
    loop = asyncio.get_running_loop()
    fd = os.pidfd_open(pid)

    def reaped() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        if os.environ.get(MULTIPROC_ENV):
            multiprocess.mark_process_dead(pid)   # its in-flight and state gauges drop out
        on_exit(os.waitstatus_to_exitcode(status))

    loop.add_reader(fd, reaped)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

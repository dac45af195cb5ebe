"""Soak: a fixed request rate through `inferplane up` in its production shape for a long time,
watching every process for leaks, injecting faults and checking the books afterwards.

    inferplane bench soak [--duration 600] [--rate 50] [--sample-s 5] [--warmup-s 60]
        [--workers 2] [--database-url URL] [--redis-url URL] [--sqlite]
        [--restart-at 0.5] [--kill-worker-at 0.75] [--out DIR]

Shape: `inferplane up --workers 2` on PostgreSQL (by default a fresh database soak_<random>
on postgresql://postgres@127.0.0.1:5432, dropped afterwards) and Redis; `--sqlite` is the
embedded shape instead (SQLite in the data directory, no Redis, one process unless
--workers says otherwise).

Traffic (open loop, request i sent at t0 + i/rate): streaming and plain chat completions,
and client disconnects (a stream closed after its first chunk, a plain request abandoned
before its answer); each request carries its own x-request-id. Faults: the backend (the fake
engine, tests/gateway/fake_engine.py, so the box's cores go to the gateway) is SIGKILLed and
restarted at `--restart-at` of the traffic, and one gateway worker is SIGKILLed at
`--kill-worker-at` (the worker supervisor forks its replacement). Failures inside a fault's
window are injected; anything else is an error.

Every `--sample-s` the `up` tree is sampled per role (up, worker supervisor, workers): RSS
and open descriptors summed from /proc; asyncio tasks (summed) and worst event-loop lag
(maxed) from /metrics. Traffic pauses after `--warmup-s` and at the end for a quiet sample
each: growth is measured between those two. At the end the books are read: the gateway's
counters before `up` stops, the request log and usage table after (bench/_soak_books.py).
Written to DIR (default bench/results/soak-<time>/): soak.png, soak.md and soak.json.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, log, write_result  # noqa: E402
from _soak_books import DatabaseBooks, balance, read_counters, read_database  # noqa: E402
from _soak_procs import (MODEL, SoakDatabase, UpShape, free_port, loop_metrics,  # noqa: E402
                         sample_tree, sqlalchemy_url, start_engine, start_up, stop, worker_pids)
from _soak_report import report  # noqa: E402

# Patterns of 20 requests: 9 streams, 9 plain, 1 stream dropped, 1 plain abandoned.
KINDS = ["stream", "plain"] * 9 + ["stream_drop", "plain_drop"]
REQUEST_TIMEOUT_S = 20.0
# A replacement worker takes up its socket's backlog once its app has started (snapshot read,
# lifespan): failures until this long after it was forked belong to the kill.
WORKER_SETTLE_S = 5.0
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432"


@dataclass
class Sample:
    t: float
    rss_mib: float                # every process of the `up` tree
    fds: int
    tasks: float
    loop_lag_ms: float
    sent: int
    errors: int
    roles: dict = field(default_factory=dict)   # role -> {rss_mib, fds, pids, *_by_pid}


@dataclass
class Outcomes:
    sent: int = 0
    ok: int = 0
    answered_error: int = 0           # an error status or an error inside the stream
    dropped: int = 0                  # client disconnects we made on purpose
    injected: int = 0                 # failures inside a fault window (both kinds)
    injected_engine: int = 0
    injected_worker: int = 0
    errors: list[str] = field(default_factory=list)   # anything else


class Soak:
    def __init__(self, args, work: Path) -> None:
        self.args, self.work = args, work
        self.engine_port, self.port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.id_prefix = f"soak-{secrets.token_hex(4)}-"
        self.outcomes = Outcomes()
        self.samples: list[Sample] = []
        self.restart: dict[str, float] = {}        # the backend's kill and restart
        self.worker_kill: dict[str, float] = {}    # the gateway worker's kill and replacement
        self.quiet: dict[str, dict] = {}      # samples with no traffic: the leak check
        self.answered: set[str] = set()       # ids the gateway answered (status or stream)
        self.cut: set[str] = set()            # ids a killed worker took down unanswered
        self.engine = self.gateway = None
        self.key = ""

    def fault_at(self, fraction: float) -> float:
        """Seconds from t0 at which `fraction` of the traffic has been sent (the quiet pause
        after the warm-up is not traffic)."""
        at = fraction * self.args.duration
        return at + (self.args.quiet_s if at >= self.args.warmup_s else 0.0)

    def in_restart_window(self, t: float) -> bool:
        """Failures from the kill until 2 s after the first success once it is back."""
        killed = self.restart.get("killed_at")
        if killed is None or t < killed - 0.5:
            return False
        recovered = self.restart.get("recovered_at")
        return recovered is None or t <= recovered + 2.0

    def in_worker_window(self, started: float, ended: float) -> bool:
        """In flight when the worker died, or sent before its replacement settled."""
        killed = self.worker_kill.get("killed_at")
        if killed is None or ended < killed:
            return False
        replaced = self.worker_kill.get("replaced_at")
        return replaced is None or started <= replaced + WORKER_SETTLE_S

    async def one(self, client: httpx.AsyncClient, i: int, t0: float) -> None:
        kind = KINDS[i % len(KINDS)]
        body = {"model": MODEL, "max_tokens": 8, "stream": kind.startswith("stream"),
                "messages": [{"role": "user", "content": f"soak request {i % 97}"}]}
        rid = f"{self.id_prefix}{i}"
        headers = {"Authorization": f"Bearer {self.key}", "x-request-id": rid}
        started = time.monotonic() - t0
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                if kind == "plain_drop":
                    # Its own client: a request cancelled mid-flight must not leave a
                    # half-used connection in the shared pool.
                    async with httpx.AsyncClient() as own:
                        status = await self._send(own, kind, body, headers, rid)
                else:
                    status = await self._send(client, kind, body, headers, rid)
        except (httpx.HTTPError, OSError) as exc:
            status = f"{type(exc).__name__}: {exc}"
        except TimeoutError:
            status = f"no answer within {REQUEST_TIMEOUT_S:g}s"
        self._record(kind, rid, status, started, time.monotonic() - t0)

    async def _send(self, client, kind: str, body: dict, headers: dict,
                    rid: str) -> int | str:
        url = self.base + "/v1/chat/completions"
        if kind == "plain_drop":
            try:
                async with asyncio.timeout(0.03):
                    response = await client.post(url, json=body, headers=headers)
                self.answered.add(rid)
                return response.status_code
            except TimeoutError:
                return "dropped"
        if kind == "plain":
            response = await client.post(url, json=body, headers=headers)
            self.answered.add(rid)
            return response.status_code
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                self.answered.add(rid)
                return response.status_code
            async for line in response.aiter_lines():
                if kind == "stream_drop" and line.startswith("data: "):
                    return "dropped"                 # leaving the block closes the connection
                if '"error"' in line:
                    self.answered.add(rid)
                    return "stream error: " + line[:200]
                if line == "data: [DONE]":
                    self.answered.add(rid)
                    return 200
        return "stream ended before [DONE]"

    def _record(self, kind: str, rid: str, status: int | str, started: float,
                ended: float) -> None:
        out = self.outcomes
        if status == 200:
            out.ok += 1
            if "killed_at" in self.restart and "recovered_at" not in self.restart \
                    and started > self.restart.get("restarted_at", float("inf")):
                self.restart["recovered_at"] = started
            return
        if status == "dropped":
            out.dropped += 1
            return
        if rid in self.answered:
            out.answered_error += 1
        if self.in_worker_window(started, ended):
            out.injected += 1
            out.injected_worker += 1
            if rid not in self.answered:
                self.cut.add(rid)
        elif self.in_restart_window(started):
            out.injected += 1
            out.injected_engine += 1
        else:
            out.errors.append(f"t={started:.1f}s {kind} {rid}: {status}")

    async def traffic(self, t0: float, first: int, last: int) -> None:
        """Requests first..last-1 at the fixed rate from now, on a client closed afterwards."""
        # No pool limit: a request queued inside httpx's pool waits behind a list scan per
        # connection event, and a backlog of thousands turns the client into the bottleneck.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        start = time.monotonic()
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            pending: set[asyncio.Task] = set()
            for i in range(first, last):
                delay = start + (i - first) / self.args.rate - time.monotonic()
                # always yield: a generator that fell behind must not create the rest of the
                # run's requests in one burst without letting any of them run
                await asyncio.sleep(max(delay, 0))
                task = asyncio.create_task(self.one(client, i, t0))
                pending.add(task)
                task.add_done_callback(pending.discard)
                self.outcomes.sent += 1
            await asyncio.gather(*pending)

    async def take_sample(self, client: httpx.AsyncClient, t0: float) -> Sample:
        tasks, lag = loop_metrics((await client.get(self.base + "/metrics")).text)
        roles = {role: {"rss_mib": round(s.rss_mib, 2), "fds": s.fds, "pids": s.pids,
                        "rss_by_pid": {str(p): round(r, 2) for p, r in s.rss_by_pid.items()},
                        "fds_by_pid": {str(p): n for p, n in s.fds_by_pid.items()}}
                 for role, s in sample_tree(self.gateway.pid).items()}
        return Sample(round(time.monotonic() - t0, 1),
                      round(sum(r["rss_mib"] for r in roles.values()), 2),
                      sum(r["fds"] for r in roles.values()), tasks, round(lag * 1000, 2),
                      self.outcomes.sent, len(self.outcomes.errors), roles)

    async def quiet_sample(self, t0: float) -> Sample:
        """No request in flight, the client's connections closed, and the gateway's idle
        upstream connections past their keep-alive: what is left is what it keeps."""
        await asyncio.sleep(self.args.quiet_s)
        async with httpx.AsyncClient(timeout=10) as client:
            return await self.take_sample(client, t0)

    async def sampler(self, t0: float) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            while True:
                try:
                    self.samples.append(await self.take_sample(client, t0))
                except httpx.HTTPError as exc:   # a scrape lost under load: the next one counts
                    log(f"sample skipped: {exc!r}")
                    await asyncio.sleep(self.args.sample_s)
                    continue
                last = self.samples[-1]
                if len(self.samples) % max(1, round(30 / self.args.sample_s)) == 1:
                    o = self.outcomes
                    log(f"t={last.t:.0f}s sent={o.sent} ok={o.ok} dropped={o.dropped} "
                        f"injected={o.injected} errors={len(o.errors)} rss={last.rss_mib:.1f}MiB "
                        f"fds={last.fds} tasks={last.tasks:.0f}")
                await asyncio.sleep(self.args.sample_s)

    async def restart_backend(self, t0: float) -> None:
        await asyncio.sleep(self.fault_at(self.args.restart_at))
        self.restart["killed_at"] = time.monotonic() - t0
        self.engine.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.engine.wait)
        await asyncio.sleep(2.0)
        self.engine = await asyncio.to_thread(start_engine, self.engine_port, self.work)
        self.restart["restarted_at"] = time.monotonic() - t0
        log(f"backend restarted at t={self.restart['restarted_at']:.1f}s")

    async def kill_worker(self, t0: float) -> None:
        """SIGKILL one gateway worker; note when the supervisor's replacement appears."""
        await asyncio.sleep(self.fault_at(self.args.kill_worker_at))
        before = worker_pids(self.gateway.pid)
        victim = before[0]
        self.worker_kill.update(pid=victim, killed_at=time.monotonic() - t0)
        os.kill(victim, signal.SIGKILL)
        while True:
            new = set(worker_pids(self.gateway.pid)) - set(before)
            if new:
                self.worker_kill.update(replacement=min(new),
                                        replaced_at=time.monotonic() - t0)
                log(f"worker {victim} killed, {min(new)} in its place at "
                    f"t={self.worker_kill['replaced_at']:.1f}s")
                return
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        t0 = time.monotonic()
        background = [asyncio.create_task(self.sampler(t0))]
        if self.args.restart_at > 0:
            background.append(asyncio.create_task(self.restart_backend(t0)))
        if self.args.kill_worker_at > 0 and self.args.workers > 1:
            background.append(asyncio.create_task(self.kill_worker(t0)))
        warm, total = (int(self.args.warmup_s * self.args.rate),
                       int(self.args.duration * self.args.rate))
        await self.traffic(t0, 0, warm)
        self.quiet["after_warmup"] = asdict(await self.quiet_sample(t0))
        await self.traffic(t0, warm, total)
        self.quiet["end"] = asdict(await self.quiet_sample(t0))
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--quiet-s", type=float, default=35.0,
                        help="pause after warm-up and at the end before the quiet samples "
                             "(longer than the gateway's 30 s upstream keep-alive)")
    parser.add_argument("--workers", type=int, default=None,
                        help="gateway worker processes of `up` (default 2; 1 with --sqlite)")
    parser.add_argument("--database-url", default=None,
                        help="registry database (default: a fresh soak_<random> database on "
                             f"{DEFAULT_POSTGRES}, dropped at the end)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--sqlite", action="store_true",
                        help="the embedded shape: SQLite in the data directory, no Redis")
    parser.add_argument("--restart-at", type=float, default=0.5,
                        help="restart the backend at this fraction of the run (0: never)")
    parser.add_argument("--kill-worker-at", type=float, default=0.75,
                        help="SIGKILL a gateway worker at this fraction of the run (0: never)")
    parser.add_argument("--out", type=Path, default=None, help="directory for png/md/json")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.rate <= 0 or args.sample_s <= 0:
        parser.error("--duration, --rate and --sample-s must be positive")
    if not 0 <= args.warmup_s < args.duration:
        parser.error("--warmup-s must be >= 0 and shorter than --duration")
    if not (0 <= args.restart_at < 1 and 0 <= args.kill_worker_at < 1):
        parser.error("--restart-at and --kill-worker-at are fractions in [0, 1)")
    if args.sqlite and args.database_url:
        parser.error("--sqlite and --database-url exclude each other")
    args.workers = args.workers or (1 if args.sqlite else 2)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or RESULTS_DIR / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    database = None
    if not args.sqlite:
        database = SoakDatabase(sqlalchemy_url(args.database_url)) if args.database_url \
            else SoakDatabase.create(DEFAULT_POSTGRES)
    shape = UpShape(args.workers, database and database.url,
                    None if args.sqlite else args.redis_url)
    try:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            soak = Soak(args, Path(tmp))
            db_url = shape.database_url or f"sqlite:///{Path(tmp) / 'data' / 'inferplane.db'}"
            # A database the operator named may hold earlier runs' usage: this run's is the
            # difference (a fresh one, or SQLite in a new data directory, starts empty).
            before = read_database(db_url, soak.id_prefix) if args.database_url \
                else DatabaseBooks()
            soak.engine = start_engine(soak.engine_port, Path(tmp))
            try:
                soak.gateway, soak.key = start_up(Path(tmp), soak.port, soak.engine_port, shape)
                log(f"soak: {args.rate:g} req/s for {args.duration:g}s, up pid "
                    f"{soak.gateway.pid}, {args.workers} worker(s), database {db_url}")
                asyncio.run(soak.run())
                counters = read_counters(httpx.get(soak.base + "/metrics", timeout=10).text)
            finally:
                stop(soak.gateway)      # Ctrl-C: workers drain, usage writers flush
                stop(soak.engine, 30)
            books = balance(counters, read_database(db_url, soak.id_prefix).minus(before),
                            soak.answered, soak.cut)
    finally:
        if database is not None:
            database.drop()
    verdict = report(out, [asdict(s) for s in soak.samples], asdict(soak.outcomes),
                     {"engine": soak.restart, "worker": soak.worker_kill}, soak.quiet, args,
                     books)
    path = write_result("soak", verdict, str(out / "soak.json"))
    print((out / "soak.md").read_text())
    print(f"plot: {out / 'soak.png'}\nresult: {path}")
    return 0 if verdict["goals_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

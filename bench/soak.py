"""Soak: a fixed request rate through `inferplane up` for a long time, watching the gateway
process for leaks.

    inferplane bench soak [--duration 600] [--rate 50] [--sample-s 5] [--warmup-s 60]
        [--restart-at 0.5] [--out DIR]

Traffic (open loop, request i sent at t0 + i/rate): streaming and plain chat completions,
and client disconnects (a stream closed after its first chunk, a plain request abandoned
before its answer). Halfway through, the backend (the fake engine, tests/gateway/fake_engine.py,
so the box's cores go to the gateway) is killed and restarted on the same port.

Every `--sample-s` the gateway process is sampled: RSS and open descriptors from /proc, asyncio
tasks and worst event-loop lag from its /metrics (inferplane_event_loop_*). Traffic pauses
after `--warmup-s` and at the end for a quiet sample each (nothing in flight, idle
connections expired): growth is measured between those two, so requests in flight at the
moment of a sample do not read as a leak. Written to DIR
(default bench/results/soak-<time>/): soak.png (the four series over time), soak.md (table
and verdict) and soak.json. Goals: RSS growth < 5% after warm-up, no growth in descriptors or
tasks, no errors but the injected ones (the restart window, the disconnects).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, ROOT, log, write_result  # noqa: E402
from _soak_report import report  # noqa: E402

MODEL = "soak"
# Patterns of 20 requests: 9 streams, 9 plain, 1 stream dropped, 1 plain abandoned.
KINDS = ["stream", "plain"] * 9 + ["stream_drop", "plain_drop"]
REQUEST_TIMEOUT_S = 20.0


@dataclass
class Sample:
    t: float
    rss_mib: float
    fds: int
    tasks: float
    loop_lag_ms: float
    sent: int
    errors: int


@dataclass
class Outcomes:
    sent: int = 0
    ok: int = 0
    dropped: int = 0                  # client disconnects we made on purpose
    injected: int = 0                 # failures inside the backend restart window
    errors: list[str] = field(default_factory=list)   # anything else


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {url} answered")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise TimeoutError(url)


def start_engine(port: int, logs: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.fake_engine", "--port",
                             str(port), "--name", "soak-engine"], cwd=ROOT,
                            stdout=open(logs / "engine.log", "ab"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", proc)
    # Streams last ~0.2 s: long enough to be cut mid-way, short enough to stay cheap.
    httpx.post(f"http://127.0.0.1:{port}/control",
               json={"first_token_delay": 0.02, "token_delay": 0.02})
    return proc


def start_gateway(work: Path, port: int, engine_port: int) -> tuple[subprocess.Popen, str]:
    # Health probes every 10 s: on a crowded box a probe slower than its 2 s timeout must not
    # take the backend out between restarts (the gateway's breaker reacts to real failures).
    config = {"data_dir": str(work / "data"), "health_interval_s": 10,
              "models": [{"name": MODEL, "engine": "openai", "context_length": 2048,
                          "price_in_per_1k": 1.0, "price_out_per_1k": 2.0, "backends": [
                              {"url": f"http://127.0.0.1:{engine_port}/v1",
                               "served_model": MODEL}]}],
              # A short open breaker: traffic returns soon after the restarted backend does.
              "gateway": {"log_level": "WARNING", "routing": {"load_poll_interval_s": 1},
                          "breaker": {"open_seconds": 2}}}
    (work / "inferplane.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "INFERPLANE_ADMIN_KEY"}
    proc = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                             str(work / "inferplane.yaml"), "--port", str(port)], cwd=ROOT,
                            env=env, stdout=open(work / "up.log", "wb"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/readyz", proc, timeout=180)
    return proc, (work / "data" / "admin.key").read_text().strip()


def sample_process(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open descriptors) of a live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = next(int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("VmRSS:"))
    return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def loop_metrics(text: str) -> tuple[float, float]:
    values = {}
    for line in text.splitlines():
        if line.startswith("inferplane_event_loop_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values["inferplane_event_loop_tasks"], values["inferplane_event_loop_lag_seconds"]


class Soak:
    def __init__(self, args, work: Path) -> None:
        self.args, self.work = args, work
        self.engine_port, self.port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.outcomes = Outcomes()
        self.samples: list[Sample] = []
        self.restart: dict[str, float] = {}
        self.quiet: dict[str, dict] = {}      # samples with no traffic: the leak check
        self.engine: subprocess.Popen | None = None
        self.gateway: subprocess.Popen | None = None
        self.key = ""

    def in_restart_window(self, t: float) -> bool:
        """Failures from the kill until 2 s after the first success once it is back."""
        killed = self.restart.get("killed_at")
        if killed is None or t < killed - 0.5:
            return False
        recovered = self.restart.get("recovered_at")
        return recovered is None or t <= recovered + 2.0

    async def one(self, client: httpx.AsyncClient, i: int, t0: float) -> None:
        kind = KINDS[i % len(KINDS)]
        body = {"model": MODEL, "max_tokens": 8, "stream": kind.startswith("stream"),
                "messages": [{"role": "user", "content": f"soak request {i % 97}"}]}
        headers = {"Authorization": f"Bearer {self.key}"}
        started = time.monotonic() - t0
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                if kind == "plain_drop":
                    # Its own client: a request cancelled mid-flight must not leave a
                    # half-used connection in the shared pool.
                    async with httpx.AsyncClient() as own:
                        status = await self._send(own, kind, body, headers)
                else:
                    status = await self._send(client, kind, body, headers)
        except (httpx.HTTPError, OSError) as exc:
            status = f"{type(exc).__name__}: {exc}"
        except TimeoutError:
            status = f"no answer within {REQUEST_TIMEOUT_S:g}s"
        self._record(kind, status, started)

    async def _send(self, client, kind: str, body: dict, headers: dict) -> int | str:
        url = self.base + "/v1/chat/completions"
        if kind == "plain_drop":
            try:
                async with asyncio.timeout(0.03):
                    return (await client.post(url, json=body, headers=headers)).status_code
            except TimeoutError:
                return "dropped"
        if kind == "plain":
            return (await client.post(url, json=body, headers=headers)).status_code
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                return response.status_code
            async for line in response.aiter_lines():
                if kind == "stream_drop" and line.startswith("data: "):
                    return "dropped"                 # leaving the block closes the connection
                if '"error"' in line:
                    return "stream error: " + line[:200]
                if line == "data: [DONE]":
                    return 200
        return "stream ended before [DONE]"

    def _record(self, kind: str, status: int | str, started: float) -> None:
        out = self.outcomes
        if status == 200:
            out.ok += 1
            if "killed_at" in self.restart and "recovered_at" not in self.restart \
                    and started > self.restart.get("restarted_at", float("inf")):
                self.restart["recovered_at"] = started
        elif status == "dropped":
            out.dropped += 1
        elif self.in_restart_window(started):
            out.injected += 1
        else:
            out.errors.append(f"t={started:.1f}s {kind}: {status}")

    async def traffic(self, t0: float, first: int, last: int) -> None:
        """Requests first..last-1 at the fixed rate from now, on a client closed afterwards."""
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        start = time.monotonic()
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            pending: set[asyncio.Task] = set()
            for i in range(first, last):
                delay = start + (i - first) / self.args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self.one(client, i, t0))
                pending.add(task)
                task.add_done_callback(pending.discard)
                self.outcomes.sent += 1
            await asyncio.gather(*pending)

    async def take_sample(self, client: httpx.AsyncClient, t0: float) -> Sample:
        tasks, lag = loop_metrics((await client.get(self.base + "/metrics")).text)
        rss, fds = sample_process(self.gateway.pid)
        return Sample(round(time.monotonic() - t0, 1), round(rss, 2), fds, tasks,
                      round(lag * 1000, 2), self.outcomes.sent, len(self.outcomes.errors))

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
                rss, fds, tasks = (self.samples[-1].rss_mib, self.samples[-1].fds,
                                   self.samples[-1].tasks)
                if len(self.samples) % max(1, round(30 / self.args.sample_s)) == 1:
                    o = self.outcomes
                    log(f"t={self.samples[-1].t:.0f}s sent={o.sent} ok={o.ok} "
                        f"dropped={o.dropped} injected={o.injected} errors={len(o.errors)} "
                        f"rss={rss:.1f}MiB fds={fds} tasks={tasks:.0f}")
                await asyncio.sleep(self.args.sample_s)

    async def restart_backend(self, t0: float) -> None:
        await asyncio.sleep(self.args.duration * self.args.restart_at)
        self.restart["killed_at"] = time.monotonic() - t0
        self.engine.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.engine.wait)
        await asyncio.sleep(2.0)
        self.engine = await asyncio.to_thread(start_engine, self.engine_port, self.work)
        self.restart["restarted_at"] = time.monotonic() - t0
        log(f"backend restarted at t={self.restart['restarted_at']:.1f}s")

    async def run(self) -> None:
        t0 = time.monotonic()
        background = [asyncio.create_task(self.sampler(t0))]
        if self.args.restart_at > 0:
            background.append(asyncio.create_task(self.restart_backend(t0)))
        warm, total = (int(self.args.warmup_s * self.args.rate),
                       int(self.args.duration * self.args.rate))
        await self.traffic(t0, 0, warm)
        self.quiet["after_warmup"] = asdict(await self.quiet_sample(t0))
        await self.traffic(t0, warm, total)
        self.quiet["end"] = asdict(await self.quiet_sample(t0))
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)

    def requests_counted(self) -> float:
        text = httpx.get(self.base + "/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("inferplane_requests_total{") and f'model="{MODEL}"' in line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--quiet-s", type=float, default=35.0,
                        help="pause after warm-up and at the end before the quiet samples "
                             "(longer than the gateway's 30 s upstream keep-alive)")
    parser.add_argument("--restart-at", type=float, default=0.5,
                        help="restart the backend at this fraction of the run (0: never)")
    parser.add_argument("--out", type=Path, default=None, help="directory for png/md/json")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.rate <= 0 or args.sample_s <= 0:
        parser.error("--duration, --rate and --sample-s must be positive")
    if not 0 <= args.warmup_s < args.duration:
        parser.error("--warmup-s must be >= 0 and shorter than --duration")
    out = args.out or RESULTS_DIR / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        soak = Soak(args, Path(tmp))
        soak.engine = start_engine(soak.engine_port, Path(tmp))
        try:
            soak.gateway, soak.key = start_gateway(Path(tmp), soak.port, soak.engine_port)
            log(f"soak: {args.rate:g} req/s for {args.duration:g}s, gateway pid "
                f"{soak.gateway.pid}")
            asyncio.run(soak.run())
            counted = soak.requests_counted()
        finally:
            for proc in (soak.gateway, soak.engine):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(30)
                    if proc.poll() is None:
                        proc.kill()
    verdict = report(out, [asdict(s) for s in soak.samples], asdict(soak.outcomes),
                     soak.restart, soak.quiet, args, counted)
    path = write_result("soak", verdict, str(out / "soak.json"))
    print((out / "soak.md").read_text())
    print(f"plot: {out / 'soak.png'}\nresult: {path}")
    return 0 if verdict["goals_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

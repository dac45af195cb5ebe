"""Fault-injection rig: real processes (`inferplane up`, builtin engines, the fake engine,
private Redis and PostgreSQL servers) and a ledger that checks nothing was lost.

Every case compares what the client saw with three books kept by the platform:
- the request log (one row per request, /admin/v1/requests) and the key's charged spend;
- the gateway's own counters (inferplane_requests_total by code, tokens, spend);
- the failure counters the case expects (upstream errors, rejections).
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from common.metric_names import Metric
from tests.conftest import free_port, start_process, stop_process, wait_http

PRICE = {"price_in_per_1k": 1.0, "price_out_per_1k": 2.0}   # every token costs: spend is checked


class BlackHole:
    """Accepts TCP connections and never answers (an engine wedged in a syscall)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


class PrivateRedis:
    """A redis-server of the test's own on a fixed port, to stop and start at will (the shared
    one on 6379 serves other tests)."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=open(self.workdir / "redis.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
            assert time.monotonic() < deadline, "private redis-server did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGKILL: an outage, not a clean shutdown (nothing is saved either way)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb into a temp dir, its own port), to crash
    and restart at will; the shared cluster on 5432 serves other tests."""

    def __init__(self, port: int) -> None:
        self.port = port
        # Directly under /tmp: the postgres user must reach it (pytest's tmp dirs are 0700).
        self.workdir = Path(tempfile.mkdtemp(prefix="inferplane-pg-"))
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1]).parent
        self.data = self.workdir / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        # PostgreSQL refuses to run as root: as root, run its tools as the postgres user.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, str(self.bin / tool), *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.workdir / "pg.log"), "-w",
                  "-o", f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 "
                        "-c fsync=off", "start")

    def crash(self) -> None:
        """Immediate shutdown: connections cut, no checkpoint (recovery on the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.crash()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_fake_engine(port: int, name: str, log: Path) -> subprocess.Popen:
    proc = start_process(["-m", "tests.gateway.fake_engine", "--port", str(port), "--name", name],
                         log_path=log)
    wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=30)
    return proc


def start_builtin_engine(port: int, served: str, log: Path, *extra: str) -> subprocess.Popen:
    proc = start_process(["-m", "builtin_engine", "serve", "--port", str(port),
                          "--served-model-name", served, "--log-level", "warning", *extra],
                         log_path=log)
    wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=180)
    return proc


def openai_model(name: str, url: str, **extra) -> dict:
    return {"name": name, "engine": "openai", "context_length": 2048, **PRICE, **extra,
            "backends": [{"url": url, "served_model": name}]}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label items): value} of a /metrics body."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric_sum(values: dict, name: str, **labels: str) -> float:
    return sum(v for (n, items), v in values.items()
               if n == name and all(dict(items).get(k) == want for k, want in labels.items()))


@dataclass
class Books:
    """One reading of everything that must account for a model's requests."""
    metrics: dict
    log: list[dict] = field(default_factory=list)
    spend: float = 0.0

    def requests_by_code(self, model: str) -> Counter:
        out = Counter()
        for (name, items), value in self.metrics.items():
            labels = dict(items)
            if name == Metric.REQUESTS.total and labels.get("model") == model and value:
                out[int(labels["code"])] += int(value)
        return out


@dataclass
class Stack:
    base: str
    admin_key: str
    key: str = ""
    key_id: int = 0

    def admin(self) -> dict:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def user(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}

    def create_key(self, **fields) -> tuple[str, int]:
        created = httpx.post(self.base + "/admin/v1/keys", headers=self.admin(), timeout=10,
                             json={"name": f"faults-{time.monotonic_ns()}", **fields})
        assert created.status_code == 201, created.text
        body = created.json()
        self.key, self.key_id = body["secret"], body["id"]
        return self.key, self.key_id

    def chat(self, model: str, stream: bool = False, max_tokens: int = 8, timeout: float = 30,
             client: httpx.Client | None = None) -> httpx.Response:
        body = {"model": model, "max_tokens": max_tokens, "stream": stream,
                "messages": [{"role": "user", "content": "count to ten"}]}
        post = (client or httpx).post
        return post(self.base + "/v1/chat/completions", json=body, headers=self.user(),
                    timeout=timeout)

    def books(self, model: str, timeout: float = 20) -> Books:
        """Books once they stand still: a request of an earlier test may still be settling
        (its spend counted, its log row not yet flushed), and a reading taken in between
        would charge it to the next test's requests."""
        return self._still(self._read(model), model, time.monotonic() + timeout)

    def _still(self, books: Books, model: str, deadline: float) -> Books:
        # two readings further apart than the usage writer's flush interval (0.5 s): a spend
        # counted but not yet logged changes the second
        while time.monotonic() < deadline:
            time.sleep(0.7)
            again = self._read(model)
            if _same(books, again, model):
                return again
            books = again
        return books

    def _read(self, model: str) -> Books:
        metrics = samples(httpx.get(self.base + "/metrics", timeout=10).text)
        rows, cursor = [], None
        while True:
            params = {"model": model, "limit": 500, **({"cursor": cursor} if cursor else {})}
            page = httpx.get(self.base + "/admin/v1/requests", params=params,
                             headers=self.admin(), timeout=10).json()
            rows += page["data"]
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
        key = httpx.get(f"{self.base}/admin/v1/keys/{self.key_id}", headers=self.admin(),
                        timeout=10).json()
        return Books(metrics, rows, float(key["spend"]))

    def settled_books(self, model: str, expected_rows: int, timeout: float = 20) -> Books:
        """Books once the usage writer has flushed `expected_rows` request-log rows."""
        deadline = time.monotonic() + timeout
        while True:
            books = self._read(model)
            if len(books.log) >= expected_rows or time.monotonic() > deadline:
                return self._still(books, model, deadline)
            time.sleep(0.3)


def _same(a: Books, b: Books, model: str) -> bool:
    return (len(a.log) == len(b.log) and a.spend == b.spend
            and metric_sum(a.metrics, Metric.SPEND_USD.total, model=model)
            == metric_sum(b.metrics, Metric.SPEND_USD.total, model=model))


def assert_nothing_lost(stack: Stack, model: str, before: Books, codes: list[int],
                        refused: list[int] = ()) -> Books:
    """Every admitted request (its final status in `codes`) is in the request log, the
    gateway's request counters, and charged: log spend == metric spend == key spend.
    Requests `refused` at admission (limits, budgets) cost nothing and are not usage: they
    are in the request counters only."""
    after = stack.settled_books(model, len(before.log) + len(codes))
    new_rows = after.log[: len(after.log) - len(before.log)]
    assert Counter(r["http_status"] for r in new_rows) == Counter(codes), new_rows
    counted = after.requests_by_code(model) - before.requests_by_code(model)
    assert counted == Counter(codes) + Counter(refused)
    logged_cost = sum(r["cost"] for r in new_rows)
    metric_cost = (metric_sum(after.metrics, Metric.SPEND_USD.total, model=model)
                   - metric_sum(before.metrics, Metric.SPEND_USD.total, model=model))
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in new_rows)
    metric_tokens = (metric_sum(after.metrics, Metric.TOKENS.total, model=model)
                     - metric_sum(before.metrics, Metric.TOKENS.total, model=model))
    assert abs(logged_cost - metric_cost) < 1e-9 and abs(after.spend - before.spend
                                                         - logged_cost) < 1e-6
    assert tokens == metric_tokens
    return after


def delta(before: Books, after: Books, name: str, **labels: str) -> float:
    return metric_sum(after.metrics, name, **labels) - metric_sum(before.metrics, name, **labels)


__all__ = ["BlackHole", "Books", "PRICE", "PrivatePostgres", "PrivateRedis", "Stack", "assert_nothing_lost", "delta", "free_port",
           "openai_model", "samples", "start_builtin_engine", "start_fake_engine",
           "stop_process"]

"""The live stack the rollout tests drive: `inferplane up` (no engines from its config), two
simulated builtin engines and two flaky engines ("flaky" fails 30% of its requests, "half"
50%), all real processes on free ports; plus the admin-API, metrics and traffic tools the
tests share."""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from control_plane.rollouts.metrics_source import parse_metrics
from tests.conftest import free_port, start_process, stop_process, wait_http

FINAL = ("succeeded", "rolled_back")
FLAKY_MARKER = "tok0"  # the flaky engine's answers start with it; the builtin engine's never do
FAIL_RATIOS = {"flaky": 0.3, "half": 0.5}


def simulated_engine_args(port: int, name: str) -> list[str]:
    return ["-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
            "--served-model-name", name, "--sim-decode-base-s", "0.001",
            "--sim-prefill-s-per-token", "0"]


def up_config(port: int) -> str:
    # A fast controller tick so that 1-2 s analysis intervals are measured on time.
    return f"port: {port}\nmodels: []\nrollout_tick_s: 0.25\n"


@dataclass
class Engine:
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@dataclass
class Stack:
    base: str
    key: str
    work: Path
    engines: dict[str, Engine]
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    def admin(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.client.request(method, f"{self.base}/admin/v1{path}", json=body,
                                       headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code < 400, f"{method} {path} -> {response.status_code}: " \
                                            f"{response.text}"
        return response.json() if response.content else {}

    def register(self, model: str, v1: str, v2: str) -> None:
        """Model with versions v1 and v2, alias default → v1, one ready backend per version
        (`v1`/`v2` name the engines behind them)."""
        self.admin("POST", "/models", {"name": model})
        for label in ("v1", "v2"):
            self.admin("POST", f"/models/{model}/versions", {"version": label})
        self.admin("PUT", f"/models/{model}/aliases/default", {"version": "v1"})
        for label, engine in (("v1", self.engines[v1]), ("v2", self.engines[v2])):
            self.admin("POST", "/backends", {"model": model, "version": label, "url": engine.url,
                                             "served_model": engine.name, "state": "ready"})

    def alias(self, model: str, alias: str = "default") -> str:
        return self.admin("GET", f"/models/{model}/aliases/{alias}")["version"]

    def wait_final(self, rollout_id: int, timeout: float = 60.0) -> dict:
        """Poll until the rollout ends; a pause fails at once (nothing here should pause)."""
        deadline = time.monotonic() + timeout
        while True:
            rollout = self.admin("GET", f"/rollouts/{rollout_id}")
            if rollout["state"] in FINAL:
                return rollout
            assert rollout["state"] != "paused", _describe(rollout)
            assert time.monotonic() < deadline, "rollout did not finish: " + _describe(rollout)
            time.sleep(0.2)

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the gateway's samples called `name` whose labels include `labels`."""
        text = self.client.get(f"{self.base}/metrics").text
        return sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def served(self, model: str, version: str) -> float:
        return self.served_by_version(model, (version,))[version]

    def served_by_version(self, model: str, versions=("v1", "v2", "none")) -> dict[str, float]:
        """Requests the gateway counted per version of `model`, from one scrape."""
        scrape = parse_metrics(self.client.get(f"{self.base}/metrics").text)
        return {v: scrape.get(model, v).requests for v in versions}


def _describe(rollout: dict) -> str:
    return (f"state={rollout['state']} reason={rollout['reason']!r} events="
            f"{[(e['kind'], e['weight'], e['message']) for e in rollout['events']]} "
            f"measurements={[m['message'] for m in rollout['measurements']]}")


@dataclass
class Reply:
    status: int
    text: str


class Traffic:
    """Chat requests from background threads until stopped (or `limit` requests in all)."""

    def __init__(self, stack: Stack, model: str, threads: int = 3, pace_s: float = 0.03,
                 limit: int = 4000):
        self.stack, self.model, self.pace_s, self.limit = stack, model, pace_s, limit
        self.replies: list[Reply] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(threads)]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, worker: int) -> None:
        headers = {"Authorization": f"Bearer {self.stack.key}"}
        with httpx.Client(timeout=30, headers=headers) as client:
            n = 0
            while not self._stop.is_set() and len(self.replies) < self.limit:
                self.replies.append(self._send(client, f"ping {worker}-{n}"))
                n += 1
                time.sleep(self.pace_s)

    def _send(self, client: httpx.Client, prompt: str) -> Reply:
        body = {"model": self.model, "max_tokens": 4,
                "messages": [{"role": "user", "content": prompt}]}
        try:
            response = client.post(f"{self.stack.base}/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:
            return Reply(0, repr(exc))
        if response.status_code != 200:
            return Reply(response.status_code, response.text)
        return Reply(200, response.json()["choices"][0]["message"]["content"])


def send(stack: Stack, model: str, n: int) -> list[Reply]:
    """n requests in sequence, after a rollout settled."""
    traffic = Traffic(stack, model, threads=1, pace_s=0.0)
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {stack.key}"}) as client:
        return [traffic._send(client, f"after {i}") for i in range(n)]


def start_stack(work: Path):
    """(Stack, processes); the caller stops the processes (stop_all)."""
    port = free_port()
    engines = {name: Engine(name, free_port()) for name in ("sim-a", "sim-b", *FAIL_RATIOS)}
    config = work / "inferplane.yaml"
    config.write_text(up_config(port))
    key = "ip-" + secrets.token_urlsafe(24)  # the admin key `up` registers at start
    procs = []
    try:
        procs.append(start_process(["-m", "control_plane", "up", "--config", str(config),
                                    "--port", str(port)], env={"INFERPLANE_ADMIN_KEY": key},
                                   cwd=work, log_path=work / "up.log"))
        for name in ("sim-a", "sim-b"):
            procs.append(start_process(simulated_engine_args(engines[name].port, name),
                                       log_path=work / f"{name}.log"))
        for name, ratio in FAIL_RATIOS.items():
            procs.append(start_process(["-m", "tests.e2e.rollouts.flaky_engine", "--port",
                                        str(engines[name].port), "--name", name,
                                        "--fail-ratio", str(ratio)],
                                       log_path=work / f"{name}.log"))
        wait_http(f"http://127.0.0.1:{port}/healthz", procs[0], timeout=120)  # no model yet
        for engine, proc in zip(engines.values(), procs[1:]):
            wait_http(engine.url + "/models", proc, timeout=120)
    except BaseException:
        stop_all(procs)
        raise
    return Stack(f"http://127.0.0.1:{port}", key, work, engines), procs


def stop_all(procs) -> None:
    for proc in procs:
        stop_process(proc)

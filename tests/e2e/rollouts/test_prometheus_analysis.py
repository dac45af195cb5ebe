"""Rollout analysis through PromQL only, as on Kubernetes: a real Prometheus scrapes two gateway
replicas (`python -m control_plane gateway`) and the control plane, which has no gateway URL
of its own (`analysis.source: prometheus`). Traffic is spread over both replicas.

- a candidate failing half its requests is rolled back, a healthy one promoted, each on
  measurements whose counts can only have come from Prometheus;
- with Prometheus down, every measurement is inconclusive and the rollout is rolled back by
  the max_inconclusive rule, never promoted.
"""
from __future__ import annotations

import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import free_port, start_process, stop_process, wait_http
from tests.e2e.multi_replica.conftest import postgres_url  # noqa: F401 (a fresh database)
from tests.e2e.rollouts.stack import FINAL, simulated_engine_args

INTERVAL_S = 3.0
ANALYSIS = {"interval_s": INTERVAL_S, "min_requests": 5, "max_error_rate": 0.05,
            "max_inconclusive": 2}
STEP = {"weight": 0.5, "pause_s": 1}


class PromStack:
    def __init__(self, work: Path):
        self.work = work
        self.key = "ip-" + secrets.token_urlsafe(24)
        self.control = f"http://127.0.0.1:{free_port()}"
        self.gateways = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
        self.engines = {name: free_port() for name in ("sim-a", "sim-b", "half")}
        self.prometheus_port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.client = httpx.Client(timeout=30, headers={"Authorization": f"Bearer {self.key}"})

    def admin(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.client.request(method, f"{self.control}/admin/v1{path}", json=body)
        assert response.status_code < 400, f"{method} {path}: {response.text}"
        return response.json() if response.content else {}

    def register(self, model: str, candidate_engine: str) -> None:
        self.admin("POST", "/models", {"name": model})
        for label in ("v1", "v2"):
            self.admin("POST", f"/models/{model}/versions", {"version": label})
        self.admin("PUT", f"/models/{model}/aliases/default", {"version": "v1"})
        for label, engine in (("v1", "sim-a"), ("v2", candidate_engine)):
            self.admin("POST", "/backends", {
                "model": model, "version": label, "state": "ready", "served_model": engine,
                "url": f"http://127.0.0.1:{self.engines[engine]}/v1"})
        for gateway in self.gateways:   # each replica reads the registry on its own
            wait_for(lambda g=gateway: self.chat(g, model).status_code == 200, 30)

    def chat(self, gateway: str, model: str) -> httpx.Response:
        return self.client.post(f"{gateway}/v1/chat/completions", json={
            "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})

    def rollout(self, model: str) -> int:
        return self.admin("POST", "/rollouts", {
            "model": model, "candidate_version": "v2", "steps": [STEP], "analysis": ANALYSIS,
            "warm_delay_s": 0})["id"]

    def wait_final(self, rollout_id: int, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            rollout = self.admin("GET", f"/rollouts/{rollout_id}")
            if rollout["state"] in FINAL:
                return rollout
            assert time.monotonic() < deadline, rollout
            time.sleep(0.25)


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.25)


class Traffic:
    """Chat requests to both replicas in turn from two threads until the block ends."""

    def __init__(self, stack: PromStack, model: str):
        self.stack, self.model, self.sent = stack, model, 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(2)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, worker: int) -> None:
        n = worker
        while not self._stop.is_set():
            try:
                self.stack.chat(self.stack.gateways[n % 2], self.model)
            except httpx.HTTPError:
                pass
            self.sent += 1
            n += 1
            time.sleep(0.02)


def start_prometheus(stack: PromStack) -> subprocess.Popen:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: install the Debian package `prometheus` (make tools)"
    targets = [g.removeprefix("http://") for g in stack.gateways]
    config = stack.work / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "inferplane-gateway", "static_configs": [{"targets": targets}]},
            {"job_name": "inferplane-control-plane",
             "static_configs": [{"targets": [stack.control.removeprefix("http://")]}]}]}))
    log = open(stack.work / "prometheus.log", "ab")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={stack.work / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{stack.prometheus_port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{stack.prometheus_port}/-/ready", proc, timeout=60)
    return proc


@pytest.fixture(scope="module")
def promstack(tmp_path_factory, postgres_url):
    stack = PromStack(tmp_path_factory.mktemp("prometheus_analysis"))
    config = stack.work / "inferplane.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(stack.work / "data"), "database_url": postgres_url, "models": [],
        "rollout_tick_s": 0.25, "gateway": {"routing": {"load_poll_interval_s": 0}},
        "analysis": {"source": "prometheus", "prometheus": {
            "url": f"http://127.0.0.1:{stack.prometheus_port}", "lag_s": 1.0,
            "selector": 'job="inferplane-gateway"'}}}))
    env = {"INFERPLANE_ADMIN_KEY": stack.key}
    try:
        stack.procs["control"] = start_process(
            ["-m", "control_plane", "control-plane", "--config", str(config), "--port",
             stack.control.rsplit(":", 1)[1]], env=env, log_path=stack.work / "control.log")
        wait_http(f"{stack.control}/healthz", stack.procs["control"], timeout=120)
        for i, gateway in enumerate(stack.gateways):
            stack.procs[f"gateway{i}"] = start_process(
                ["-m", "control_plane", "gateway", "--config", str(config), "--port",
                 gateway.rsplit(":", 1)[1]], log_path=stack.work / f"gateway{i}.log")
        for name in ("sim-a", "sim-b"):
            stack.procs[name] = start_process(simulated_engine_args(stack.engines[name], name),
                                              log_path=stack.work / f"{name}.log")
        stack.procs["half"] = start_process(
            ["-m", "tests.e2e.rollouts.flaky_engine", "--port", str(stack.engines["half"]),
             "--name", "half", "--fail-ratio", "0.5"], log_path=stack.work / "half.log")
        for i, gateway in enumerate(stack.gateways):
            wait_http(f"{gateway}/healthz", stack.procs[f"gateway{i}"], timeout=120)
        for name, port in stack.engines.items():
            wait_http(f"http://127.0.0.1:{port}/v1/models", stack.procs[name], timeout=120)
        stack.procs["prometheus"] = start_prometheus(stack)
        yield stack
    finally:
        stack.client.close()
        for proc in reversed(stack.procs.values()):
            stop_process(proc)


def results(rollout: dict) -> list[dict]:
    return [m["result"] for m in rollout["measurements"]]


def _counted(measurements: list[dict]) -> list[dict]:
    return [m for m in measurements if m["candidate_requests"] + m["stable_requests"] > 0]


def test_failing_canary_rolls_back_and_healthy_one_is_promoted(promstack):
    promstack.register("prom-bad", "half")
    promstack.register("prom-good", "sim-b")
    with Traffic(promstack, "prom-bad"), Traffic(promstack, "prom-good"):
        bad, good = promstack.rollout("prom-bad"), promstack.rollout("prom-good")
        bad, good = promstack.wait_final(bad), promstack.wait_final(good)
    assert bad["state"] == "rolled_back", bad
    assert promstack.admin("GET", "/models/prom-bad/aliases/default")["version"] == "v1"
    failed = [m for m in results(bad) if m["verdict"] == "fail"]
    assert failed and failed[-1]["candidate"]["error_rate"] > 0.05, results(bad)
    assert good["state"] == "succeeded", good
    assert promstack.admin("GET", "/models/prom-good/aliases/default")["version"] == "v2"
    passed = [m for m in results(good) if m["verdict"] == "pass"]
    assert passed and passed[-1]["candidate"]["error_rate"] == 0, results(good)
    # The control plane scrapes no gateway itself: these counts came through PromQL.
    assert _counted(results(bad)) and _counted(results(good))


def test_prometheus_outage_is_inconclusive_and_never_promotes(promstack):
    promstack.register("prom-dark", "sim-b")
    stop_process(promstack.procs.pop("prometheus"))
    with Traffic(promstack, "prom-dark"):
        rollout = promstack.wait_final(promstack.rollout("prom-dark"))
    assert rollout["state"] == "rolled_back", rollout
    assert promstack.admin("GET", "/models/prom-dark/aliases/default")["version"] == "v1"
    verdicts = [m["verdict"] for m in results(rollout)]
    assert verdicts and set(verdicts) == {"inconclusive"}, results(rollout)
    assert all("Prometheus" in m["message"] for m in results(rollout)), results(rollout)
    assert any("inconclusive measurements in a row" in e["message"]
               for e in rollout["events"]), rollout["events"]

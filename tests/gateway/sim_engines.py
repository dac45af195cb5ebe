"""Real builtin engines (`--simulate`: the scheduler and KV cache run, the model does not) in
subprocesses, for routing tests that need /tokenize and /kv/summary."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import httpx

from registry.snapshot import BackendView
from tests.gateway.conftest import ROOT, free_port, wait_http

SERVED = "sim-m"


@dataclass
class SimEngine:
    name: str
    port: int
    proc: subprocess.Popen

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backend(self, weight: float = 1.0) -> BackendView:
        return BackendView(id=self.name, url=self.root + "/v1", engine="builtin",
                           served_model=SERVED, gpu=None, weight=weight, tier="hot",
                           state="ready", adapters=(), version="v1")

    def chat(self, messages: list[dict], max_tokens: int = 2) -> dict:
        r = httpx.post(self.root + "/v1/chat/completions", trust_env=False, timeout=30,
                       json={"model": SERVED, "messages": messages, "max_tokens": max_tokens})
        r.raise_for_status()
        return r.json()

    def resident(self) -> list[str]:
        return httpx.get(self.root + "/kv/summary", trust_env=False).json()["resident_hashes"]


def start_sim_engines(count: int) -> list[SimEngine]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    engines = []
    for i in range(count):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
             "--served-model-name", SERVED, "--sim-decode-base-s", "0.001",
             "--log-level", "warning"], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        engines.append(SimEngine(f"sim{i}", port, proc))
    try:
        for engine in engines:
            wait_http(engine.root + "/health", timeout=90)
    except RuntimeError:
        stop_sim_engines(engines)
        raise
    return engines


def stop_sim_engines(engines: list[SimEngine]) -> None:
    for engine in engines:
        engine.proc.terminate()
    for engine in engines:
        try:
            engine.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            engine.proc.kill()

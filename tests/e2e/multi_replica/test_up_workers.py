"""`inferplane up --workers 2` as real processes over real HTTP, with a simulated builtin engine:
both workers serve, one RPM limit holds exactly across them (the supervisor's shared store), a
model registered through the admin API (forwarded to the control plane) routes on every
worker, a killed worker is replaced while serving goes on, and SIGTERM stops every process."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import psutil
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from common.metric_names import Metric
from control_plane.cli import build_parser
from control_plane.up_workers import ControlPlaneLink, ControlPlaneRoutes
from tests.conftest import free_port, running_up, start_process, stop_process, wait_http
from tests.e2e.multi_replica.conftest import MODEL as OTHER_MODEL

MODEL = "sim"
COLD = "cold-sim"   # no engine until its first request
WORKERS = 2
RPM = 10
BUDGET_REQUESTS = 10   # a request costs exactly 20 tokens at 1 USD per 1k: 0.02 USD
ASK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("up-workers")
    engine_port, other_port = free_port(), free_port()
    # An engine of its own for the model registered later (started meanwhile): health probes
    # of a registered backend would also judge `up`'s managed engine at the same address.
    other = start_process(["-m", "builtin_engine", "serve", "--simulate", "--port",
                           str(other_port), "--served-model-name", OTHER_MODEL,
                           "--sim-decode-base-s", "0.001", "--log-level", "warning"],
                          log_path=work / "other-engine.log")
    engine_args = {"simulate": True, "sim_decode_base_s": 0.001, "num_blocks": 128}
    config = {"engine_port_base": engine_port,
              "models": [{"name": MODEL, "model": "smollm2-135m-instruct",
                          "price_in_per_1k": 1.0, "price_out_per_1k": 1.0,
                          "engine_args": engine_args},
                         {"name": COLD, "model": "smollm2-135m-instruct", "tier": "cold",
                          "engine_args": engine_args}]}
    try:
        with running_up(work, config, timeout=180, args=("--workers", str(WORKERS))) as up:
            base, key, proc = up
            wait_http(f"http://127.0.0.1:{other_port}/health", other, timeout=120)
            yield {"base": base, "key": key, "proc": proc, "log": work / "up.log",
                   "other": f"http://127.0.0.1:{other_port}/v1"}
    finally:
        stop_process(other)


def supervisor(stack) -> psutil.Process:
    """The worker supervisor: the child of `up` forked from it (the engines are exec'd)."""
    up = psutil.Process(stack["proc"].pid)
    forked = [c for c in up.children() if c.cmdline() == up.cmdline()]
    assert len(forked) == 1, forked
    return forked[0]


def worker_pids(stack) -> set[int]:
    return {w.pid for w in supervisor(stack).children()}


def serve_once(stack, model: str = MODEL, key: str | None = None) -> tuple[object, int | None]:
    """One request on a fresh connection: (200 or "status body", pid of the worker that
    accepted it)."""
    headers = {"authorization": f"Bearer {key or stack['key']}"}
    with httpx.Client(base_url=stack["base"], timeout=60, trust_env=False) as client:
        r = client.post("/v1/chat/completions", json={"model": model, **ASK}, headers=headers)
        _, client_port = r.extensions["network_stream"].get_extra_info("client_addr")
        outcome = r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:300]}"
        return outcome, _owner(worker_pids(stack), client_port)


def _owner(pids: set[int], client_port: int) -> int | None:
    for pid in pids:
        conns = psutil.Process(pid).net_connections(kind="tcp")
        if any(c.raddr and c.raddr.port == client_port for c in conns):
            return pid
    return None


def serve_until_every_worker(stack, model: str = MODEL, attempts: int = 60) -> dict[int, int]:
    """Requests on fresh connections until each worker accepted one: {pid: outcome}."""
    seen: dict[int, object] = {}
    for _ in range(attempts):
        status, pid = serve_once(stack, model)
        if pid is not None:
            seen[pid] = status
        if set(seen) == worker_pids(stack):
            break
    return seen


def admin(stack, method: str, path: str, body: dict) -> dict:
    r = httpx.request(method, stack["base"] + "/admin/v1" + path, json=body, timeout=30,
                      headers={"authorization": f"Bearer {stack['key']}"})
    assert r.status_code in (200, 201), r.text
    return r.json()


def test_workers_must_be_at_least_one(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--workers", "0"])
    assert "must be at least 1" in capsys.readouterr().err


def test_both_workers_serve(stack):
    assert len(worker_pids(stack)) == WORKERS
    seen = serve_until_every_worker(stack)
    assert set(seen) == worker_pids(stack) and set(seen.values()) == {200}, seen


def test_metrics_merge_workers_and_control_plane(stack):
    text = httpx.get(stack["base"] + "/metrics", timeout=10).text
    assert f'{Metric.BACKEND_HEALTHY}{{' in text    # the control plane's engine health
    assert f"{Metric.REQUESTS.total}{{" in text         # the workers' request counts
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names)), "a family appears twice"


def test_console_and_admin_auth_come_from_the_control_plane(stack):
    page = httpx.get(stack["base"] + "/console/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    refused = httpx.get(stack["base"] + "/admin/v1/keys", timeout=10)   # no key
    assert refused.status_code == 401, refused.text
    paths = httpx.get(stack["base"] + "/openapi.json", timeout=10).json()["paths"]
    assert "/v1/chat/completions" in paths and "/admin/v1/keys" in paths


def test_a_cold_model_starts_on_its_first_request(stack):
    """The worker asks the control plane (over its socket, with the admin key) to start it."""
    status, pid = serve_once(stack, COLD)
    assert status == 200 and pid in worker_pids(stack)


async def _fire(stack, secret: str, n: int, path: str,
                body: dict) -> list[tuple[int, dict, int | None]]:
    """n concurrent requests, each on its own connection: (status, json, worker pid)."""
    pids = worker_pids(stack)

    async def one() -> tuple[int, dict, int | None]:
        async with httpx.AsyncClient(base_url=stack["base"], timeout=60,
                                     trust_env=False) as client:
            r = await client.post(path, json={"model": MODEL, **body},
                                  headers={"authorization": f"Bearer {secret}"})
            _, port = r.extensions["network_stream"].get_extra_info("client_addr")
            return r.status_code, r.json(), _owner(pids, port)
    return await asyncio.gather(*(one() for _ in range(n)))


def fire_on_every_worker(stack, key: dict, n: int, path: str = "/v1/chat/completions",
                         body: dict = ASK) -> list[tuple[int, dict, int | None]]:
    """_fire with a fresh key made of `key` until every worker took some of the requests: the
    kernel may hand one worker every connection, and that run would prove nothing."""
    for _ in range(3):
        secret = admin(stack, "POST", "/keys", key)["secret"]
        time.sleep(1.0)   # every worker's poller (0.25 s) has the new key
        results = asyncio.run(_fire(stack, secret, n, path, body))
        if {pid for *_, pid in results} == worker_pids(stack):
            return results
    pytest.fail("every attempt's connections went to one worker")


def test_rpm_limit_is_exact_across_workers(stack):
    results = fire_on_every_worker(stack, {"name": "rpm", "rpm_limit": RPM}, 3 * RPM)
    codes = [status for status, *_ in results]
    # Per-worker stores would admit RPM on one worker plus at least one on the other.
    assert codes.count(200) == RPM and codes.count(429) == 2 * RPM, codes


def test_budget_is_exact_across_workers(stack):
    """Token-id prompts with ignore_eos cost exactly what admission holds, so no settle
    refunds anything: one shared store admits BUDGET_REQUESTS, one per worker more."""
    key = {"name": "spend", "max_budget": BUDGET_REQUESTS * 0.02 + 0.01}
    body = {"prompt": list(range(100, 110)), "max_tokens": 10, "ignore_eos": True}
    results = fire_on_every_worker(stack, key, 3 * BUDGET_REQUESTS, "/v1/completions", body)
    served = [data for status, data, _ in results if status == 200]
    assert all(d["usage"]["total_tokens"] == 20 for d in served), served[:2]
    assert len(served) == BUDGET_REQUESTS, [status for status, *_ in results]


def test_model_registered_through_admin_routes_on_every_worker(stack):
    admin(stack, "POST", "/models", {"name": "second"})
    admin(stack, "POST", "/backends", {"model": "second", "url": stack["other"],
                                       "served_model": OTHER_MODEL, "state": "ready"})
    time.sleep(1.0)
    seen = serve_until_every_worker(stack, "second")
    assert set(seen) == worker_pids(stack) and set(seen.values()) == {200}, seen


def test_a_killed_worker_is_replaced_and_serving_goes_on(stack):
    before = worker_pids(stack)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = worker_pids(stack)
        if len(now) == WORKERS and victim not in now:
            break
        time.sleep(0.2)
    assert len(now) == WORKERS and victim not in now, now
    assert f"gateway worker {victim} exited" in stack["log"].read_text()
    seen = serve_until_every_worker(stack)
    assert set(seen) == now and set(seen.values()) == {200}, seen


def test_a_killed_worker_loses_none_of_the_usage_it_accounted(stack):
    """Requests a worker answered are in the request log even when it is SIGKILLed before it
    hands off its spool segment: the control plane writes the dead worker's open segment."""
    victim, mine = min(worker_pids(stack)), []
    headers = {"authorization": f"Bearer {stack['key']}"}
    for i in range(80):
        request_id = f"spool-{victim}-{i}"
        with httpx.Client(base_url=stack["base"], timeout=60, trust_env=False) as client:
            r = client.post("/v1/chat/completions", json={"model": MODEL, **ASK},
                            headers={**headers, "x-request-id": request_id})
            _, client_port = r.extensions["network_stream"].get_extra_info("client_addr")
            if r.status_code == 200 and _owner({victim}, client_port) == victim:
                mine.append(request_id)
        if len(mine) == 3:
            break
    os.kill(victim, signal.SIGKILL)   # well inside the worker's 500 ms hand-off interval
    assert len(mine) == 3
    deadline, logged = time.monotonic() + 30, set()
    while time.monotonic() < deadline and not set(mine) <= logged:
        page = httpx.get(stack["base"] + "/admin/v1/requests", headers=headers, timeout=30,
                         params={"model": MODEL, "limit": 200})
        logged = {row["request_id"] for row in page.json()["data"]}
        time.sleep(0.5)
    assert set(mine) <= logged, (mine, sorted(logged)[-10:])


async def _serve_on_unix_socket(app, path: str) -> tuple[uvicorn.Server, asyncio.Task]:
    server = uvicorn.Server(uvicorn.Config(app, uds=path, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task


async def test_forwarding_keeps_request_and_answer_then_503_when_the_control_plane_is_gone(
        tmp_path):
    control = FastAPI()

    @control.post("/admin/v1/echo")
    async def echo(request: Request):
        return JSONResponse({"query": request.url.query, "body": (await request.body()).decode(),
                             "auth": request.headers.get("authorization")},
                            status_code=201, headers={"x-from": "control-plane"})
    gateway = FastAPI()
    gateway.get("/v1/ping")(lambda: {"from": "gateway"})
    link = ControlPlaneLink(str(tmp_path / "control.sock"), tmp_path)
    server, serving = await _serve_on_unix_socket(control, link.socket_path)
    routes = ControlPlaneRoutes(gateway, link.client())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=routes),
                                 base_url="http://gw") as client:
        r = await client.post("/admin/v1/echo?a=1&b=2", content=b"hello",
                              headers={"authorization": "Bearer k"})
        assert (r.status_code, r.headers["x-from"]) == (201, "control-plane")
        assert r.json() == {"query": "a=1&b=2", "body": "hello", "auth": "Bearer k"}
        assert (await client.get("/v1/ping")).json() == {"from": "gateway"}
        server.should_exit = True
        await serving
        r = await client.get("/admin/v1/keys")
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "control_plane_unavailable"


# Runs last: it stops the shared stack.
def test_sigterm_stops_every_process(stack):
    proc = stack["proc"]
    everything = psutil.Process(proc.pid).children(recursive=True)
    assert len(everything) >= WORKERS + 2   # supervisor, workers, engine
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    _, alive = psutil.wait_procs(everything, timeout=15)
    assert not alive, alive

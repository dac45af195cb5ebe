"""The control-plane leader SIGKILLed in the middle of a rollout: the standby takes the
PostgreSQL advisory lock, resumes the rollout from the row (step, counters, step clock) and
carries it to its verdict — promoted for a healthy candidate, rolled back for a failing one.
Clients never stop being served: a gateway replica routes on its last snapshot while no
control plane leads.

Real processes: two `inferplane control-plane` (leader, standby), one `inferplane gateway`,
simulated builtin engines and a flaky engine, on a throw-away PostgreSQL database.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import free_port, start_process, stop_process, wait_http
from tests.e2e.rollouts.stack import FLAKY_MARKER, Engine, Stack, Traffic, send, \
    simulated_engine_args
from tests.registry.databases import create_pg_database, drop_pg_database

ADMIN_KEY = "ip-failover-" + uuid.uuid4().hex
ANALYSIS = {"interval_s": 1.5, "min_requests": 4, "max_error_rate": 0.05,
            "max_inconclusive": 3}
TAKEOVER_S = 20.0  # SIGKILL → the standby answers the admin API (lock poll + start-up)


@dataclass
class ControlPlane:
    name: str
    url: str
    log: Path
    proc: object


@dataclass
class Cluster:
    work: Path
    config: Path
    gateway: Stack  # client traffic and the gateway's metrics
    engines: dict[str, Engine]
    planes: list[ControlPlane] = field(default_factory=list)  # [leader, standby]
    procs: list = field(default_factory=list)

    @property
    def admin(self) -> Stack:
        return Stack(self.planes[0].url, ADMIN_KEY, self.work, self.engines,
                     client=self.gateway.client)

    def start_plane(self, name: str) -> ControlPlane:
        port = free_port()
        log = self.work / f"{name}.log"
        proc = start_process(["-m", "control_plane", "control-plane", "--config",
                              str(self.config), "--port", str(port)], log_path=log,
                             env={"INFERPLANE_ADMIN_KEY": ADMIN_KEY})
        plane = ControlPlane(name, f"http://127.0.0.1:{port}", log, proc)
        self.planes.append(plane)
        return plane

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until one control plane answers and every other stands by; leader first."""
        deadline = time.monotonic() + timeout
        while True:
            for plane in self.planes:
                assert plane.proc.poll() is None, plane.log.read_text()[-2000:]
            leading = [p for p in self.planes if answers(p.url)]
            waiting = [p for p in self.planes
                       if p not in leading and "standby" in p.log.read_text()]
            if len(leading) == 1 and len(waiting) == len(self.planes) - 1:
                self.planes = leading + waiting
                return
            assert time.monotonic() < deadline, [p.log.read_text()[-500:] for p in self.planes]
            time.sleep(0.2)

    def kill_leader(self) -> float:
        """SIGKILL the leader; returns how long the standby took to answer as leader."""
        leader = self.planes.pop(0)
        os.killpg(leader.proc.pid, signal.SIGKILL)
        leader.proc.wait(10)
        killed = time.monotonic()
        wait_http(self.planes[0].url + "/openapi.json", self.planes[0].proc, timeout=TAKEOVER_S)
        return time.monotonic() - killed


@pytest.fixture(scope="module")
def database():
    name, url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/openapi.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, database):
    work = tmp_path_factory.mktemp("failover")
    gateway_port = free_port()
    config = work / "inferplane.yaml"
    config.write_text(yaml.safe_dump({
        "database_url": database, "models": [], "data_dir": str(work / "data"),
        "gateway_metrics_urls": [f"http://127.0.0.1:{gateway_port}/metrics"],
        "rollout_tick_s": 0.25}))
    engines = {name: Engine(name, free_port()) for name in ("sim-a", "sim-b", "half")}
    cluster = Cluster(work, config, Stack(f"http://127.0.0.1:{gateway_port}", ADMIN_KEY, work,
                                          engines), engines)
    procs = cluster.procs
    try:
        for name in ("first", "second"):  # both at once: whichever locks first leads
            cluster.start_plane(name)
        for name in ("sim-a", "sim-b"):
            procs.append(start_process(simulated_engine_args(engines[name].port, name),
                                       log_path=work / f"{name}.log"))
        procs.append(start_process(["-m", "tests.e2e.rollouts.flaky_engine", "--port",
                                    str(engines["half"].port), "--name", "half",
                                    "--fail-ratio", "0.5"], log_path=work / "half.log"))
        cluster.settle()  # the leader answers: the database is migrated
        procs.append(start_process(["-m", "control_plane", "gateway", "--config", str(config),
                                    "--port", str(gateway_port)], log_path=work / "gw.log"))
        wait_http(cluster.gateway.base + "/healthz", procs[-1], timeout=120)
        for engine, proc in zip(engines.values(), procs):
            wait_http(engine.url + "/models", proc, timeout=120)
        yield cluster
    finally:
        cluster.gateway.client.close()
        everything = [p.proc for p in cluster.planes] + procs
        for proc in everything:  # all told at once: their graceful stops overlap
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in everything:
            stop_process(proc)


def wait_for(cluster: Cluster, rid: int, ready, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        rollout = cluster.admin.admin("GET", f"/rollouts/{rid}")
        if ready(rollout):
            return rollout
        assert time.monotonic() < deadline, rollout
        time.sleep(0.1)


def when(event: dict) -> float:
    return datetime.fromisoformat(event["at"]).astimezone(timezone.utc).timestamp()


def wait_for_route(cluster: Cluster, model: str, timeout: float = 15.0) -> None:
    """The gateway replica polls the registry: wait until it serves the new model."""
    deadline = time.monotonic() + timeout
    while [r.status for r in send(cluster.gateway, model, 1)] != [200]:
        assert time.monotonic() < deadline, f"gateway never routed {model}"
        time.sleep(0.2)


@dataclass
class Failover:
    rollout: dict  # as the new leader finished it
    traffic: Traffic
    killed_at: float  # wall clock, comparable with event timestamps
    takeover_s: float

    def measured_after_kill(self) -> list[dict]:
        return [m for m in self.rollout["measurements"] if when(m) > self.killed_at]


def rollout_with_failover(cluster: Cluster, model: str, v2_engine: str, steps: list[dict],
                          kill_when) -> Failover:
    """Under live traffic, start a canary of v2, SIGKILL the leader once `kill_when(rollout)`
    holds, follow the rollout on the new leader to its end."""
    if len(cluster.planes) < 2:  # the last failover used up the standby
        cluster.start_plane(f"standby-{model}")
        cluster.settle()
    cluster.admin.register(model, v1="sim-a", v2=v2_engine)
    wait_for_route(cluster, model)
    with Traffic(cluster.gateway, model) as traffic:
        rid = cluster.admin.admin("POST", "/rollouts", {
            "model": model, "candidate_version": "v2", "steps": steps, "analysis": ANALYSIS,
            "warm_delay_s": 0})["id"]
        wait_for(cluster, rid, lambda r: r["state"] == "progressing" and kill_when(r))
        killed_at = time.time()
        takeover_s = cluster.kill_leader()
        rollout = wait_for(cluster, rid, lambda r: r["state"] in ("succeeded", "rolled_back"))
    assert takeover_s < TAKEOVER_S
    return Failover(rollout, traffic, killed_at, takeover_s)


def kinds(rollout: dict) -> list[str]:
    return [e["kind"] for e in rollout["events"]]


def test_standby_resumes_a_healthy_canary_and_promotes_it(cluster):
    # Killed mid-rollout once a measurement passed (usually within step 0's pause).
    run = rollout_with_failover(
        cluster, "resume-good", "sim-b",
        [{"weight": 0.3, "pause_s": 3}, {"weight": 0.6, "pause_s": 1}],
        lambda r: any(m["result"]["verdict"] == "pass" for m in r["measurements"]))
    rollout = run.rollout
    assert rollout["state"] == "succeeded", rollout["reason"]
    # Resumed, not restarted: one pending, each step entered once, in order.
    assert kinds(rollout) == ["pending", "progressing", "progressing", "promoting", "succeeded"]
    assert [e["weight"] for e in rollout["events"] if e["kind"] == "progressing"] == [0.3, 0.6]
    assert all(m["result"]["verdict"] != "fail" for m in rollout["measurements"])
    assert {m["step"] for m in run.measured_after_kill()} >= {1}  # judged by the new leader
    assert cluster.admin.alias("resume-good") == "v2"
    # The gateway kept serving through the leaderless seconds.
    assert run.traffic.replies and all(r.status == 200 for r in run.traffic.replies)


def test_standby_resumes_a_failing_canary_and_rolls_it_back(cluster):
    # Killed as soon as the canary serves, before any measurement.
    run = rollout_with_failover(cluster, "resume-bad", "half", [{"weight": 0.5, "pause_s": 30}],
                                lambda r: True)
    rollout = run.rollout
    assert rollout["state"] == "rolled_back", rollout["reason"]
    assert kinds(rollout) == ["pending", "progressing", "aborting", "rolled_back"]
    verdicts = [m["result"]["verdict"] for m in run.measured_after_kill()]
    assert verdicts and verdicts[-1] == "fail"
    assert cluster.admin.alias("resume-bad") == "v1"
    assert any(r.status >= 500 for r in run.traffic.replies)  # the canary did fail clients
    # After the rollback every request is v1's (once the replica saw the snapshot).
    deadline = time.monotonic() + 10
    while True:
        replies = send(cluster.gateway, "resume-bad", 10)
        if all(r.status == 200 and FLAKY_MARKER not in r.text for r in replies):
            break
        assert time.monotonic() < deadline, [r.text for r in replies]
        time.sleep(0.3)

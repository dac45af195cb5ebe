"""Alerts delivered end to end by real processes: `inferplane up` with the real model and a
fault-injecting engine, scraped by Prometheus (the committed rules, `for` shortened), routed by
Alertmanager (the committed routes and inhibitions, short timers) to a webhook in this test.

- a burst of upstream 5xx burns the error budget: the fast-burn alert pages with the model's
  labels, the slow-burn alerts of the same model are inhibited, and the backend-errors alert
  files a ticket naming the model and the backend;
- the builtin engine is killed: the engine-down alert pages with the model and instance, and is
  resolved once the supervisor has restarted the engine.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from common.metric_names import Metric
from tests.alerts.monitoring import (alertmanager_config, fast_rules, running_alertmanager,
                                     running_prometheus)
from tests.alerts.webhook_receiver import WebhookReceiver, alerts_in
from tests.conftest import free_port, running_up, start_process, stop_process, wait_http
from tests.observability.test_prometheus_e2e import wait_for_samples

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
FLAKY = "flaky"
RUNBOOK = "https://github.com/inferplane/inferplane/blob/main/alerts/runbooks.md#"


@pytest.fixture(scope="module")
def fake_engine(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("fake") / "engine.log"
    # The fake engine plus the /v1/models the health prober needs; faults come from /control.
    proc = start_process(["-m", "tests.e2e.rollouts.flaky_engine", "--port", str(port),
                          "--name", FLAKY, "--fail-ratio", "0"], log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, fake_engine):
    engine_port = free_port()
    config = {"engine_port_base": engine_port,
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 4}},
                         {"name": FLAKY, "engine": "openai",
                          "backends": [{"url": f"{fake_engine}/v1"}]}]}
    with running_up(tmp_path_factory.mktemp("up"), config) as (base, key, proc):
        yield {"base": base, "key": key, "proc": proc, "engine_port": engine_port}


@pytest.fixture(scope="module")
def alerting(stack, tmp_path_factory):
    """(webhook, alertmanager URL, prometheus URL) around the running stack."""
    work = tmp_path_factory.mktemp("alerting")
    # The engine's identity comes from its scrape target, as a PodMonitor relabels it from the
    # pod's labels in Kubernetes (deploy/kubernetes/base/monitoring.yaml).
    jobs = [{"job_name": "inferplane-gateway",
             "static_configs": [{"targets": [stack["base"].removeprefix("http://")]}]},
            {"job_name": "inferplane-engine",
             "static_configs": [{"targets": [f"127.0.0.1:{stack['engine_port']}"],
                                 "labels": {"model": MODEL}}]}]
    with WebhookReceiver() as hook, \
            running_alertmanager(work / "am", alertmanager_config(hook.url)) as am, \
            running_prometheus(work / "prom", jobs, fast_rules(work / "rules"), am) as prom:
        wait_for_samples(prom, 'up{job="inferplane-engine"} == 1', timeout=30)
        yield hook, am, prom


def chat(client: httpx.Client, model: str) -> int:
    body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    return client.post("/v1/chat/completions", json=body).status_code


def wait_until_served(client: httpx.Client, model: str, timeout: float = 30.0) -> None:
    """The health prober marks a new backend ready after its first round."""
    deadline = time.monotonic() + timeout
    while chat(client, model) != 200:
        assert time.monotonic() < deadline, f"{model} not served within {timeout}s"
        time.sleep(0.5)


def spread(client: httpx.Client, model: str, seconds: float, pause: float = 0.25) -> list[int]:
    """Requests spread over several scrapes, so rate() sees the counters move."""
    codes, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        codes.append(chat(client, model))
        time.sleep(pause)
    return codes


def firing(name: str, **labels):
    def match(notification: dict) -> bool:
        return any(all(a["labels"].get(k) == v for k, v in labels.items())
                   for a in alerts_in(notification, name, "firing"))
    return match


def test_error_burst_pages_for_the_budget_burn(stack, alerting, fake_engine):
    hook, am, prom = alerting
    headers = {"Authorization": f"Bearer {stack['key']}"}
    with httpx.Client(base_url=stack["base"], headers=headers, timeout=30) as client:
        wait_until_served(client, FLAKY)
        assert set(spread(client, FLAKY, 2.5)) == {200}
        httpx.post(f"{fake_engine}/control", json={"fail_status": 500}).raise_for_status()
        try:
            codes = spread(client, FLAKY, 4.0)
            assert all(code >= 500 for code in codes), codes
            note = hook.wait_for(firing("InferplaneErrorBudgetBurnFast", model=FLAKY), 60)
        finally:
            httpx.post(f"{fake_engine}/control", json={"fail_status": None}).raise_for_status()
    assert note["receiver"] == "pager" and note["path"] == "/pager"
    assert note["groupLabels"] == {"model": FLAKY}
    alert = alerts_in(note, "InferplaneErrorBudgetBurnFast", "firing")[0]
    assert alert["labels"]["severity"] == "page"
    assert alert["labels"]["slo"] == "availability"
    assert alert["annotations"]["runbook_url"] == RUNBOOK + "inferplaneerrorbudgetburnfast"
    assert FLAKY in alert["annotations"]["summary"]
    # The slow windows fire too in Prometheus, but the fast burn inhibits them.
    slow = {"InferplaneErrorBudgetBurnSlow", "InferplaneErrorBudgetBurnVerySlow"}
    active = httpx.get(f"{am}/api/v2/alerts", params={"filter": f'model="{FLAKY}"'}).json()
    inhibited = {a["labels"]["alertname"] for a in active if a["status"]["inhibitedBy"]}
    assert slow <= inhibited
    delivered = {a["labels"]["alertname"] for n in hook.notifications for a in n["alerts"]}
    assert not slow & delivered
    # The cause goes to the ticket queue, naming the backend the gateway routed to.
    picks = wait_for_samples(prom, f'{Metric.ROUTING_DECISIONS.total}{{model="{FLAKY}"}} > 0')
    (backend,) = {sample["metric"]["backend"] for sample in picks}  # its one backend
    ticket = hook.wait_for(firing("InferplaneBackendErrors", model=FLAKY, backend=backend), 30)
    assert ticket["receiver"] == "tickets"
    assert ticket["groupLabels"] == {"model": FLAKY, "backend": backend}
    cause = alerts_in(ticket, "InferplaneBackendErrors", "firing")[0]
    assert cause["labels"]["severity"] == "ticket"
    assert cause["annotations"]["runbook_url"] == RUNBOOK + "inferplanebackenderrors"


def test_killed_engine_pages_then_resolves_after_restart(stack, alerting):
    hook, _, prom = alerting
    engine = engine_pid(stack["proc"].pid, stack["engine_port"])
    os.kill(engine, signal.SIGKILL)
    killed_at = time.monotonic()
    note = hook.wait_for(firing("InferplaneEngineDown", model=MODEL), 60)
    assert note["receiver"] == "pager"
    alert = alerts_in(note, "InferplaneEngineDown", "firing")[0]
    assert alert["labels"]["severity"] == "page"
    assert alert["labels"]["instance"] == f"127.0.0.1:{stack['engine_port']}"
    assert alert["annotations"]["runbook_url"] == RUNBOOK + "inferplaneenginedown"
    assert time.monotonic() - killed_at < 60
    resolved = hook.wait_for(lambda n: bool(alerts_in(n, "InferplaneEngineDown", "resolved")),
                             180)
    # The group of the model may hold other alerts still firing (no healthy backend yet).
    assert resolved["receiver"] == "pager" and resolved["groupLabels"] == {"model": MODEL}
    assert engine_pid(stack["proc"].pid, stack["engine_port"]) != engine  # restarted
    wait_for_samples(prom, 'up{job="inferplane-engine"} == 1', timeout=10)


def engine_pid(parent: int, port: int) -> int:
    """The builtin engine child of `inferplane up` that serves `port`."""
    for task in Path(f"/proc/{parent}/task").iterdir():
        for pid in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"builtin_engine" in cmdline and str(port).encode() in cmdline:
                return int(pid)
    raise AssertionError(f"no builtin engine on port {port} under process {parent}")

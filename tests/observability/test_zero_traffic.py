"""Signals that exist before anything happens: `inferplane up` with the real model and no
traffic exports a series for every metric name the dashboards and alert rules use.

The name list is read from dashboards/*.json and alerts/*.rules.yml, so a new panel or rule
on a metric that only appears after its first event fails here.
"""
from __future__ import annotations

import time

import httpx
import pytest

from common.metric_names import Metric
from gateway.traffic.breaker import BreakerState
from tests.conftest import free_port, running_up
from tests.observability.metric_names import (is_exported, names_from_exposition,
                                              names_with_samples, referenced_metrics)

MODEL = "smollm2-135m-instruct"
# One series per rollout, per SLO or per guardrail rule that matched: none exist on a fresh
# install, so these families are declared without samples. The rules read rollouts and SLOs
# directly (no rate()): no series = no rollout, no objective. The last test shows a budget's
# series appearing as soon as its SLO exists.
PER_OBJECT = {Metric.ROLLOUT_STATE, Metric.ROLLOUT_STEP_STARTED,
              Metric.SLO_ERROR_BUDGET_REMAINING, Metric.GUARDRAIL_ACTIONS.total}


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory):
    engine_port = free_port()
    config = {"engine_port_base": engine_port, "rollout_tick_s": 0.5,
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 2}}]}
    with running_up(tmp_path_factory.mktemp("quiet"), config) as (base, key, _):
        yield {"base": base, "key": key, "engine": f"http://127.0.0.1:{engine_port}"}


def scrape(stack) -> tuple[str, str]:
    return (httpx.get(stack["base"] + "/metrics", timeout=10).text,
            httpx.get(stack["engine"] + "/metrics", timeout=10).text)


def test_every_dashboard_and_rule_metric_has_a_series_before_any_request(quiet_stack):
    gateway, engine = scrape(quiet_stack)
    assert 'code="200"' in gateway and Metric.REQUESTS.total in gateway
    assert " 1.0" not in "".join(line for line in gateway.splitlines()
                                 if line.startswith(Metric.REQUESTS.total)), \
        "no request was sent, every request counter is zero"
    present = names_with_samples(gateway) | names_with_samples(engine)
    declared = names_from_exposition(gateway)
    referenced = referenced_metrics()
    assert len(referenced) >= 40
    missing = {n for n in referenced - PER_OBJECT if not is_exported(n, present)}
    assert missing == set(), f"no series at start-up: {sorted(missing)}"
    assert PER_OBJECT <= declared


def test_known_label_sets_are_initialised(quiet_stack):
    gateway, _ = scrape(quiet_stack)
    backend = httpx.get(quiet_stack["base"] + "/admin/v1/backends", timeout=10, headers={
        "Authorization": f"Bearer {quiet_stack['key']}"}).json()
    backend_ids = {str(b["id"]) for b in (backend["data"] if "data" in backend else backend)}
    assert backend_ids
    for backend_id in backend_ids:
        assert (f'{Metric.BACKEND_HEALTHY}{{backend="{backend_id}",model="{MODEL}"}} 1.0'
                in gateway)
        assert (f'{Metric.CIRCUIT_BREAKER_STATE}{{backend="{backend_id}"}} '
                f'{float(BreakerState.CLOSED.code)}' in gateway)
    for reason in ("rate_limit", "queue_full", "no_backend"):
        assert f'{Metric.REJECTIONS.total}{{model="{MODEL}",reason="{reason}"}} 0.0' in gateway
    assert f'{Metric.REQUESTS.total}{{code="503",model="{MODEL}",version="none"}} 0.0' in gateway


def test_an_slo_budget_series_appears_when_the_slo_is_created(quiet_stack):
    headers = {"Authorization": f"Bearer {quiet_stack['key']}"}
    created = httpx.post(quiet_stack["base"] + "/admin/v1/slos", headers=headers, timeout=10,
                         json={"name": "avail", "model": MODEL, "metric": "availability",
                               "objective": 0.99, "window_s": 3600})
    assert created.status_code == 201, created.text
    series = f'{Metric.SLO_ERROR_BUDGET_REMAINING}{{model="{MODEL}",slo="avail"}}'
    deadline = time.monotonic() + 20
    while series not in scrape(quiet_stack)[0]:
        assert time.monotonic() < deadline, "the SLO tracker never exported the new budget"
        time.sleep(0.5)

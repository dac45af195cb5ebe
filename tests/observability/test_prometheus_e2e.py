"""A real Prometheus server scrapes gateway metrics and evaluates the generated rules.

By default it scrapes tests/observability/synthetic_gateway.py. Set
INFERPLANE_OBS_GATEWAY_TARGET=host:port (and optionally
INFERPLANE_OBS_ENGINE_TARGET) to scrape running processes instead; they must
be serving traffic for the SLO recording rules to produce samples.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from common.metric_names import Metric
from tests.conftest import ROOT, free_port, start_process, stop_process, wait_http
from tests.observability.metric_names import dashboard_exprs

GATEWAY_TARGET = os.environ.get("INFERPLANE_OBS_GATEWAY_TARGET")
ENGINE_TARGET = os.environ.get("INFERPLANE_OBS_ENGINE_TARGET")
# What Grafana would substitute with every variable set to "All".
GRAFANA_VARIABLES = {"$__rate_interval": "15s", "$job": ".*", "$instance": ".*", "$model": ".*"}


def prometheus_config(gateway: str, rule_dir: Path) -> dict:
    jobs = [{"job_name": "inferplane-gateway", "static_configs": [{"targets": [gateway]}]}]
    if ENGINE_TARGET:
        jobs.append({"job_name": "inferplane-engine",
                     "static_configs": [{"targets": [ENGINE_TARGET]}]})
    return {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rule_dir / "*.rules.yml")], "scrape_configs": jobs}


@pytest.fixture(scope="module")
def gateway_target(tmp_path_factory):
    if GATEWAY_TARGET:
        yield GATEWAY_TARGET
        return
    port = free_port()
    log = tmp_path_factory.mktemp("synthetic") / "exporter.log"
    proc = start_process(["-m", "tests.observability.synthetic_gateway", "--port", str(port)],
                         log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", proc, timeout=30)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def prometheus(gateway_target, tmp_path_factory):
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: install the Debian package `prometheus` (make tools)"
    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(gateway_target, ROOT / "alerts")))
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)
        log.close()


def query(base: str, expr: str) -> dict:
    response = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", (expr, body)
    return body["data"]


def wait_for_samples(base: str, expr: str, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = query(base, expr)["result"]
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{expr} returned no samples within {timeout}s")


def grafana_substitute(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert not re.search(r"\$\w", expr), f"unsubstituted Grafana variable in {expr}"
    return expr


def test_slo_recording_rules_produce_samples(prometheus):
    ratios = wait_for_samples(prometheus, "inferplane:sli_error_ratio:rate5m")
    assert all("model" in sample["metric"] for sample in ratios)
    assert all(0.0 <= float(sample["value"][1]) <= 1.0 for sample in ratios)
    for name in ("inferplane:sli_error_ratio:rate3d", "inferplane:slo_burn_rate:rate1h",
                 "inferplane:ttft_seconds:p95_rate5m", "inferplane:tpot_seconds:p95_rate5m"):
        assert wait_for_samples(prometheus, name, timeout=15)


def test_every_rule_evaluates_without_error(prometheus):
    wait_for_samples(prometheus, "inferplane:sli_error_ratio:rate5m")
    time.sleep(2)  # let every group run at least once after data arrived
    groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) >= 40
    broken = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert broken == {}


@pytest.mark.parametrize("board", sorted(dashboard_exprs()))
def test_dashboard_queries_are_valid_promql(prometheus, board):
    for expr in dashboard_exprs()[board]:
        if expr.startswith("label_values("):
            continue  # a Grafana variable function, not PromQL
        query(prometheus, grafana_substitute(expr))


def must_show_data(expr: str) -> bool:
    if expr.startswith("label_values(") or "ALERTS" in expr:
        return False
    # Real traffic need not touch rejections, breakers or shadows: demand the request panels.
    return GATEWAY_TARGET is None or Metric.REQUESTS.total in expr


@pytest.mark.parametrize("board", ["gateway-overview.json", "slo.json", "rollouts.json"])
def test_dashboard_panels_show_data_from_the_gateway(prometheus, board):
    wait_for_samples(prometheus, "inferplane:sli_error_ratio:rate5m")
    time.sleep(2)
    empty = []
    for expr in filter(must_show_data, dashboard_exprs()[board]):
        if not query(prometheus, grafana_substitute(expr))["result"]:
            empty.append(expr)
    assert empty == []

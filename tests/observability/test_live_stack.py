"""The SRE pack against the real thing: `inferplane up` (gateway + a simulated builtin engine)
serving traffic, scraped by a real Prometheus server.

- every metric the dashboards and alert rules use is exported by the live gateway or engine;
- the SLO recording rules return samples computed from the live gateway's series.
"""
from __future__ import annotations

import shutil
import subprocess
import time

import httpx
import pytest
import yaml

from common.metric_names import EngineMetric
from tests.conftest import ROOT, free_port, running_up, wait_http
from tests.observability.metric_names import missing_metrics, names_from_exposition
from tests.observability.test_prometheus_e2e import query, wait_for_samples

MODEL = "sim-chat"


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory):
    engine_port = free_port()
    engine_args = {"simulate": True, "sim_decode_base_s": 0.002, "sim_prefill_s_per_token": 0.00001,
                   "num_blocks": 512}
    config = {"engine_port_base": engine_port,
              "models": [{"name": MODEL, "model": "smollm2-135m-instruct",
                          "engine_args": engine_args}]}
    with running_up(tmp_path_factory.mktemp("live"), config) as (base, key, _):
        yield {"gateway": base.removeprefix("http://"), "engine": f"127.0.0.1:{engine_port}",
               "key": key}


def drive_traffic(stack, n: int = 40) -> None:
    headers = {"Authorization": f"Bearer {stack['key']}"}
    with httpx.Client(base_url=f"http://{stack['gateway']}", headers=headers, timeout=30) as c:
        for i in range(n):
            body = {"model": MODEL, "max_tokens": 8, "stream": i % 2 == 0,
                    "messages": [{"role": "user", "content": f"question {i % 5}"}]}
            assert c.post("/v1/chat/completions", json=body).status_code == 200
        c.post("/v1/chat/completions", json={"model": "unknown", "messages": []})


def test_every_dashboard_and_rule_metric_is_exported_live(live_stack):
    drive_traffic(live_stack)
    exported = set()
    for target in (live_stack["gateway"], live_stack["engine"]):
        exported |= names_from_exposition(httpx.get(f"http://{target}/metrics").text)
    assert missing_metrics(exported) == set()


@pytest.fixture(scope="module")
def prometheus(live_stack, tmp_path_factory):
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: install the Debian package `prometheus` (make tools)"
    workdir = tmp_path_factory.mktemp("prom-live")
    jobs = [{"job_name": "inferplane-gateway", "static_configs": [{"targets": [live_stack["gateway"]]}]},
            {"job_name": "inferplane-engine", "static_configs": [{"targets": [live_stack["engine"]]}]}]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(ROOT / "alerts" / "*.rules.yml")], "scrape_configs": jobs}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def test_slo_recording_rules_from_live_traffic(live_stack, prometheus):
    drive_traffic(live_stack, n=10)  # Prometheus needs two scrapes around traffic for rate()
    wait_for_samples(prometheus, 'up{job="inferplane-engine"} == 1', timeout=30)
    time.sleep(2.5)
    drive_traffic(live_stack, n=10)
    ratios = wait_for_samples(prometheus, "inferplane:sli_error_ratio:rate5m", timeout=60)
    assert any(sample["metric"].get("model") == MODEL for sample in ratios)
    assert wait_for_samples(prometheus, "inferplane:ttft_seconds:p95_rate5m", timeout=30)
    engine_rate = query(prometheus, f'rate({EngineMetric.GENERATION_TOKENS.total}[1m])')["result"]
    assert engine_rate, "the engine's vLLM-named series reach Prometheus"

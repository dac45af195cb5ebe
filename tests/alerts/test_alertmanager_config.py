"""alerts/alertmanager.yml: amtool validity, routing by severity, and inhibition on a real
Alertmanager fed alerts through its API."""
from __future__ import annotations

import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from tests.alerts.monitoring import ALERTS_DIR, alertmanager_config, running_alertmanager
from tests.alerts.webhook_receiver import WebhookReceiver
from tests.observability.metric_names import rules

CONFIG = ALERTS_DIR / "alertmanager.yml"
RECEIVER_FOR = {"page": "pager", "ticket": "tickets"}


@pytest.fixture(scope="module")
def amtool() -> str:
    path = shutil.which("amtool")
    assert path, "amtool not found: install the Debian package `prometheus-alertmanager` (make tools)"
    return path


def check_config(amtool: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True,
                          timeout=30)


def route(amtool: str, *labels: str) -> str:
    result = subprocess.run([amtool, "config", "routes", "test", f"--config.file={CONFIG}",
                             *labels], capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.strip()


def test_committed_config_passes_amtool(amtool):
    result = check_config(amtool, CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 inhibit rules" in result.stdout and "1 templates" in result.stdout


def test_pagerduty_and_slack_example_receivers_are_valid(amtool, tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    example = yaml.safe_load((ALERTS_DIR / "templates" / "receivers.example.yml").read_text())
    assert {r["name"] for r in example["receivers"]} == {r["name"] for r in config["receivers"]}
    config["receivers"] = example["receivers"]
    config["templates"] = [str(ALERTS_DIR / t) for t in config["templates"]]
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    result = check_config(amtool, tmp_path / "alertmanager.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_route_to_an_undefined_receiver_is_rejected(amtool, tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    config["route"]["routes"][0]["receiver"] = "nobody"
    config["templates"] = []
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    result = check_config(amtool, tmp_path / "alertmanager.yml")
    assert result.returncode != 0 and 'undefined receiver "nobody"' in result.stdout + result.stderr


def test_every_alert_routes_by_its_severity(amtool):
    alerts = [rule for rule in rules() if "alert" in rule]
    assert len(alerts) >= 15
    for rule in alerts:
        severity = rule["labels"]["severity"]
        assert route(amtool, f"alertname={rule['alert']}", f"severity={severity}",
                     "model=m") == RECEIVER_FOR[severity], rule["alert"]
    assert route(amtool, "alertname=Unlabelled") == "tickets"  # nothing is dropped


def post_alerts(base: str, alerts: list[dict]) -> None:
    starts = datetime.now(timezone.utc)
    body = [{"labels": labels, "startsAt": starts.isoformat(),
             "endsAt": (starts + timedelta(minutes=5)).isoformat(),
             "annotations": {"summary": labels["alertname"]}} for labels in alerts]
    httpx.post(f"{base}/api/v2/alerts", json=body, timeout=10).raise_for_status()


def test_a_down_backend_inhibits_its_models_latency_alerts(tmp_path):
    down = {"alertname": "InferplaneEngineDown", "severity": "page", "model": "llama",
            "instance": "vllm-0:8000"}
    slow = {"alertname": "InferplaneTTFTP95OverSLO", "severity": "ticket", "slo": "ttft"}
    with WebhookReceiver() as hook, \
            running_alertmanager(tmp_path, alertmanager_config(hook.url)) as am:
        post_alerts(am, [down, {**slow, "model": "llama"}, {**slow, "model": "qwen"}])
        hook.wait_for(lambda n: n["receiver"] == "tickets"
                      and n["groupLabels"] == {"model": "qwen"}, 30)
        hook.wait_for(lambda n: n["receiver"] == "pager", 30)
        time.sleep(2)  # two more group intervals: nothing else may arrive
        inhibited = httpx.get(f"{am}/api/v2/alerts",
                              params={"filter": 'alertname="InferplaneTTFTP95OverSLO"'}).json()
    by_model = {a["labels"]["model"]: a["status"]["inhibitedBy"] for a in inhibited}
    assert by_model["llama"] and not by_model["qwen"]
    delivered = [(n["receiver"], a["labels"]["alertname"], a["labels"]["model"])
                 for n in hook.notifications for a in n["alerts"]]
    assert sorted(set(delivered)) == [("pager", "InferplaneEngineDown", "llama"),
                                      ("tickets", "InferplaneTTFTP95OverSLO", "qwen")]

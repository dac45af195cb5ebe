"""Prometheus rules: promtool validity, unit tests, coverage of every alert, runbooks."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.observability.metric_names import ROOT, rules

ALERTS_DIR = ROOT / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("*.rules.yml"))
TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.yml"))


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install the Debian package `prometheus` (make tools)"
    return path


def alert_rules() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def test_rule_files_exist():
    names = {p.name for p in RULE_FILES}
    assert {"slo.rules.yml", "gateway.rules.yml", "engine.rules.yml"} <= names
    assert TEST_FILES, "alerts/tests/*.yml holds the promtool unit tests"


def test_promtool_check_rules(promtool):
    result = subprocess.run([promtool, "check", "rules", *map(str, RULE_FILES)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass(promtool):
    result = subprocess.run([promtool, "test", "rules", *map(str, TEST_FILES)],
                            capture_output=True, text=True, timeout=120, cwd=ALERTS_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_rules_match_the_generator():
    result = subprocess.run([sys.executable, str(ALERTS_DIR / "build.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_generator_applies_a_custom_objective(tmp_path: Path):
    subprocess.run([sys.executable, str(ALERTS_DIR / "build.py"), "--objective", "0.99",
                    "--out", str(tmp_path)], check=True, timeout=60)
    text = (tmp_path / "slo.rules.yml").read_text()
    assert "vector(0.99)" in text
    assert "inferplane:sli_error_ratio:rate1h > 0.144" in text  # 14.4 * (1 - 0.99)


def test_generator_rejects_an_impossible_objective():
    result = subprocess.run([sys.executable, str(ALERTS_DIR / "build.py"), "--objective", "1.5",
                             "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--objective must be between 0 and 1" in result.stderr


def test_sli_recording_rules_cover_every_window():
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for window in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"):
        assert f"inferplane:sli_error_ratio:rate{window}" in recorded
        assert f"inferplane:slo_burn_rate:rate{window}" in recorded


def test_burn_rate_alerts_use_the_workbook_windows():
    by_name = {rule["alert"]: rule for rule in alert_rules()}
    expected = {
        "InferplaneErrorBudgetBurnFast": ("page", "1h", "5m", "0.0144"),
        "InferplaneErrorBudgetBurnMedium": ("page", "6h", "30m", "0.006"),
        "InferplaneErrorBudgetBurnSlow": ("ticket", "1d", "2h", "0.003"),
        "InferplaneErrorBudgetBurnVerySlow": ("ticket", "3d", "6h", "0.001"),
    }
    for name, (severity, long_w, short_w, threshold) in expected.items():
        rule = by_name[name]
        assert rule["labels"]["severity"] == severity
        assert f"inferplane:sli_error_ratio:rate{long_w} > {threshold}" in rule["expr"]
        assert f"inferplane:sli_error_ratio:rate{short_w} > {threshold}" in rule["expr"]


def test_every_alert_has_annotations_and_a_runbook_section():
    runbook = (ALERTS_DIR / "runbooks.md").read_text()
    anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbook, re.MULTILINE)}
    for rule in alert_rules():
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        anchor = notes["runbook_url"].rsplit("#", 1)[1]
        assert anchor == rule["alert"].lower()
        assert anchor in anchors, f"alerts/runbooks.md has no section for {rule['alert']}"
        assert rule["labels"]["severity"] in {"page", "ticket"}


def _unit_test_cases() -> list[dict]:
    cases = []
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases.extend(test.get("alert_rule_test", []))
    return cases


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    cases = _unit_test_cases()
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    names = {rule["alert"] for rule in alert_rules()}
    assert len(names) >= 15
    assert names - fires == set(), "alerts without a test where they fire"
    assert names - quiet == set(), "alerts without a test where they stay quiet"

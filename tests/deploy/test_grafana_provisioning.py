"""Grafana provisioning (dashboards/provisioning/) and the panel queries it loads: every query
parses as PromQL (promtool, as recording rules) and reads only exported or recorded series."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.observability.metric_names import (DASHBOARD_DIR, DOCUMENTED_METRICS,
                                              PROMETHEUS_SERIES, dashboard_exprs, is_exported,
                                              metric_names_in, recorded_names, rules)

PROVISIONING = DASHBOARD_DIR / "provisioning"
# What Grafana substitutes before a query reaches Prometheus (multi-value variables as All).
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h",
                     "job": ".*", "instance": ".*", "model": ".*"}
_VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def substitute(expr: str) -> str:
    def value(match: re.Match) -> str:
        assert match.group(1) in GRAFANA_VARIABLES, f"unknown Grafana variable in {expr}"
        return GRAFANA_VARIABLES[match.group(1)]
    return _VARIABLE.sub(value, expr)


def panel_queries() -> list[tuple[str, str]]:
    """(dashboard file, PromQL) for every panel target; label_values() variables excluded."""
    return [(board, expr) for board, exprs in dashboard_exprs().items() for expr in exprs
            if not expr.startswith("label_values(")]


def test_datasource_is_the_prometheus_the_dashboards_select():
    doc = yaml.safe_load((PROVISIONING / "datasources" / "inferplane.yaml").read_text())
    (source,) = doc["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "${PROMETHEUS_URL}"
    for board in DASHBOARD_DIR.glob("*.json"):
        variable = next(v for v in yaml.safe_load(board.read_text())["templating"]["list"]
                        if v["type"] == "datasource")
        assert variable["query"] == source["type"], board.name


def test_dashboard_provider_loads_the_generated_folder():
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "inferplane.yaml").read_text())
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["folder"] == "Inferplane"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/inferplane"
    assert len(list(DASHBOARD_DIR.glob("*.json"))) >= 4  # what gets mounted there


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install the Debian package `prometheus` (make tools)"
    return path


def test_every_panel_query_parses_with_promtool(promtool, tmp_path):
    queries = panel_queries()
    assert len(queries) >= 50
    records = [{"record": f"panel:{i}", "expr": substitute(expr)}
               for i, (_, expr) in enumerate(queries)]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "panels", "rules": records}]}))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "panels.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(records)} rules found" in result.stdout


def test_promtool_check_fails_on_a_broken_query(promtool, tmp_path):
    (tmp_path / "bad.yml").write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "panel:0", "expr": substitute("sum(rate(x_total[$__rate_interval])")}]}]}))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "bad.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0


@pytest.mark.parametrize("board", sorted(dashboard_exprs()))
def test_panels_read_only_exported_or_recorded_series(board):
    known = DOCUMENTED_METRICS | recorded_names(rules()) | PROMETHEUS_SERIES
    unknown = {(expr, name) for b, expr in panel_queries() if b == board
               for name in metric_names_in(expr) if not is_exported(name, known)}
    assert unknown == set()


def test_an_unknown_grafana_variable_is_reported():
    with pytest.raises(AssertionError, match="unknown Grafana variable"):
        substitute('rate(x_total{team=~"$team"}[5m])')

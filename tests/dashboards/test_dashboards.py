"""Grafana dashboards: generated, consistent, and usable with any Prometheus datasource."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from common.metric_names import Metric
from tests.observability.metric_names import DASHBOARD_DIR, dashboard_exprs

EXPECTED = ("gateway-overview.json", "engine-fleet.json", "slo.json", "rollouts.json")
RANGE_SELECTOR = re.compile(r"\[([^\[\]]+)\]")
RATE_CALL = re.compile(r"\b(?:rate|irate|increase)\s*\(")


def load(name: str) -> dict:
    return json.loads((DASHBOARD_DIR / name).read_text())


def test_committed_dashboards_match_the_generator():
    result = subprocess.run([sys.executable, str(DASHBOARD_DIR / "build.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", EXPECTED)
def test_dashboard_header(name):
    board = load(name)
    assert board["schemaVersion"] >= 39
    assert board["uid"] and board["title"] and board["description"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"job", "instance", "model"} <= set(variables)
    for name_ in ("job", "instance", "model"):
        assert variables[name_]["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", EXPECTED)
def test_every_panel_has_unit_description_and_datasource_variable(name):
    panels = load(name)["panels"]
    assert len(panels) >= 6
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        where = f"{name}: {panel['title']}"
        assert panel["description"].strip(), where
        assert panel["fieldConfig"]["defaults"]["unit"], where
        assert panel["datasource"]["uid"] == "${datasource}", where
        assert panel["targets"], where
        for tgt in panel["targets"]:
            assert tgt["datasource"]["uid"] == "${datasource}", where
            assert tgt["expr"].strip(), where


@pytest.mark.parametrize("name", EXPECTED)
def test_every_range_selector_uses_rate_interval(name):
    for expr in dashboard_exprs()[name]:
        assert RATE_CALL.search(expr) is None or "[$__rate_interval]" in expr, expr
        for window in RANGE_SELECTOR.findall(expr):
            assert window == "$__rate_interval", f"{name}: {expr}"


@pytest.mark.parametrize("name", EXPECTED)
def test_panels_fit_the_grid_without_overlap(name):
    taken: set[tuple[int, int]] = set()
    for panel in load(name)["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & taken, f"{name}: {panel['title']} overlaps another panel"
        taken |= cells


def test_gateway_overview_shows_token_latency_quantiles():
    exprs = " ".join(dashboard_exprs()["gateway-overview.json"])
    for metric in (f"{Metric.TIME_TO_FIRST_TOKEN}_bucket",
                   f"{Metric.TIME_PER_OUTPUT_TOKEN}_bucket"):
        for q in ("0.5", "0.95", "0.99"):
            assert f"histogram_quantile({q}, sum by (le) (rate({metric}" in exprs


def test_lint_catches_a_fixed_window():
    bad = f'rate({Metric.REQUESTS.total}{{job=~"$job"}}[5m])'
    assert RANGE_SELECTOR.findall(bad) == ["5m"]

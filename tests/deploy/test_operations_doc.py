"""docs/operations.md stays in step with the rules and the production overlay."""
from __future__ import annotations

import re

from tests.conftest import ROOT
from tests.deploy.kustomize import build
from tests.observability.metric_names import rules

DOC = (ROOT / "docs" / "operations.md").read_text()
RUNBOOK = (ROOT / "alerts" / "runbooks.md").read_text()


def test_every_alert_has_a_row_linking_its_runbook():
    rows = {m.group(1): m for m in re.finditer(
        r"^\| (Inferplane\w+) \| (page|ticket) \|.*\(\.\./alerts/runbooks\.md#(\w+)\) \|$",
        DOC, re.MULTILINE)}
    alerts = {r["alert"]: r["labels"]["severity"] for r in rules() if "alert" in r}
    assert set(rows) == set(alerts)
    headings = {h.lower() for h in re.findall(r"^## (\w+)$", RUNBOOK, re.MULTILINE)}
    for name, row in rows.items():
        assert row.group(2) == alerts[name], name
        assert row.group(3) == name.lower() and row.group(3) in headings


def test_every_production_workload_is_described():
    for obj in build("production"):
        if obj["kind"] in {"Deployment", "StatefulSet", "ScaledObject", "NetworkPolicy",
                           "ServiceMonitor", "PodMonitor", "HorizontalPodAutoscaler"}:
            assert f"`{obj['metadata']['name']}`" in DOC, (obj["kind"], obj["metadata"]["name"])

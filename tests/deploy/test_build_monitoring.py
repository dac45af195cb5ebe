"""deploy/kubernetes/build_monitoring.py: the committed PrometheusRule objects are the alerts/
rule files, unchanged, and pass promtool; the dashboard ConfigMaps hold dashboards/*.json."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import yaml

from tests.deploy.kustomize import KUBERNETES_DIR
from tests.observability.metric_names import DASHBOARD_DIR, RULE_DIR, rules

GENERATOR = KUBERNETES_DIR / "build_monitoring.py"
COMMITTED = KUBERNETES_DIR / "base" / "prometheusrule.yaml"
BOARDS = KUBERNETES_DIR / "base" / "grafana-dashboards.yaml"


def generator():
    spec = importlib.util.spec_from_file_location("build_monitoring", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_objects_are_up_to_date():
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_objects_hold_every_rule_of_alerts_unchanged():
    objects = list(yaml.safe_load_all(COMMITTED.read_text()))
    assert {o["metadata"]["name"] for o in objects} == {
        "inferplane-" + p.name.removesuffix(".rules.yml") for p in RULE_DIR.glob("*.rules.yml")}
    assert all(o["metadata"]["labels"]["release"] == "prometheus" for o in objects)
    embedded = [rule for o in objects for group in o["spec"]["groups"] for rule in group["rules"]]
    assert embedded == rules()


def test_a_changed_rule_file_changes_the_output(tmp_path):
    for path in RULE_DIR.glob("*.rules.yml"):
        shutil.copy(path, tmp_path / path.name)
    engine = tmp_path / "engine.rules.yml"
    engine.write_text(engine.read_text().replace("for: 2m", "for: 7m"))
    build = generator()
    changed = build.render(tmp_path)["prometheusrule.yaml"]
    assert changed != build.render()["prometheusrule.yaml"] and "for: 7m" in changed


def test_embedded_groups_pass_promtool(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install the Debian package `prometheus` (make tools)"
    paths = []
    for obj in yaml.safe_load_all(COMMITTED.read_text()):
        path = tmp_path / f"{obj['metadata']['name']}.yml"
        path.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
        paths.append(str(path))
    result = subprocess.run([promtool, "check", "rules", *paths], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_config_maps_hold_the_boards_byte_for_byte():
    maps = list(yaml.safe_load_all(BOARDS.read_text()))
    boards = {p.name: p.read_text() for p in DASHBOARD_DIR.glob("*.json")}
    assert {name for m in maps for name in m["data"]} == set(boards)
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        (name, text), = config_map["data"].items()
        assert text == boards[name]
        assert len(text.encode()) < 256 * 1024  # client-side apply's annotation limit

"""deploy/kubernetes: every overlay builds with kubectl kustomize, every object validates
against its schema (kubernetes-validate for built-in kinds, tests/deploy/crd_schemas.py for
custom resources), and the objects fit together: probes, drain, autoscaling, disruption
budgets, leader election, network policies, monitoring, engine tiers and the settings file."""
from __future__ import annotations

import re
import shutil
import subprocess
from urllib.parse import urlsplit

import jsonschema  # installed with kubernetes-validate
import kubernetes_validate
import pytest
import yaml

from common.metric_names import Metric
from control_plane.settings import load_settings
from tests.deploy.crd_schemas import SCHEMAS
from tests.deploy.kustomize import OVERLAYS, build, container, of_kind, one, pod_labels, selects
from tests.observability.metric_names import DOCUMENTED_METRICS, is_exported, metric_names_in

K8S_VERSION = "1.32.0"
GATEWAY_DRAIN_S = 10  # uvicorn's timeout_graceful_shutdown in control_plane/up.py


@pytest.fixture(params=OVERLAYS)
def objects(request):
    return build(request.param)


def test_production_creates_the_documented_set():
    created = {(o["kind"], o["metadata"]["name"]) for o in build("production")}
    assert {("Deployment", "inferplane-gateway"), ("HorizontalPodAutoscaler", "inferplane-gateway"),
            ("PodDisruptionBudget", "inferplane-gateway"), ("Deployment", "inferplane-control-plane"),
            ("StatefulSet", "engine-hot"), ("StatefulSet", "engine-warm"),
            ("Deployment", "engine-cold"), ("ScaledObject", "engine-cold"),
            ("Service", "inferplane-postgres"), ("Service", "inferplane-redis"),
            ("ServiceMonitor", "inferplane-gateway"), ("PodMonitor", "inferplane-engines"),
            ("NetworkPolicy", "engines-from-inferplane-only"),
            ("PrometheusRule", "inferplane-slo")} <= created
    assert {o["metadata"].get("namespace") for o in build("production")
            if o["kind"] != "Namespace"} == {"inferplane"}
    assert not of_kind(build("production"), "Secret"), "secrets are referenced, never shipped"


def test_builtin_objects_validate_strictly(objects):
    checked = 0
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in SCHEMAS:
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 20


def test_custom_resources_match_their_schemas(objects):
    custom = [o for o in objects if (o["apiVersion"], o["kind"]) in SCHEMAS]
    assert {o["kind"] for o in custom} == {"ServiceMonitor", "PodMonitor", "PrometheusRule",
                                           "ScaledObject"}
    for obj in custom:
        jsonschema.validate(obj, SCHEMAS[(obj["apiVersion"], obj["kind"])])


def test_a_misplaced_custom_resource_field_is_refused():
    monitor = yaml.safe_load(yaml.safe_dump(one(build("dev"), "PodMonitor", "inferplane-engines")))
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(monitor, SCHEMAS[("monitoring.coreos.com/v1", "PodMonitor")])


def test_gateway_probes_and_graceful_drain(objects):
    gateway = one(objects, "Deployment", "inferplane-gateway")
    c = container(gateway)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = gateway["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > int(pre_stop[1]) + GATEWAY_DRAIN_S
    assert gateway["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"]}
    assert env["INFERPLANE_DATABASE_URL"]["name"] == "inferplane-secrets"


def test_gateway_autoscaler_and_disruption_budget_fit(objects):
    gateway = one(objects, "Deployment", "inferplane-gateway")
    hpa = one(objects, "HorizontalPodAutoscaler", "inferplane-gateway")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "inferplane-gateway"}
    assert hpa["spec"]["minReplicas"] <= gateway["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    pdb = one(objects, "PodDisruptionBudget", "inferplane-gateway")
    assert selects(pdb["spec"]["selector"], pod_labels(gateway))
    if "minAvailable" in pdb["spec"]:  # a budget that blocks every drain is a stuck node upgrade
        assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]


def test_control_plane_runs_two_with_leader_election():
    plane = one(build("production"), "Deployment", "inferplane-control-plane")
    assert plane["spec"]["replicas"] == 2
    c = container(plane)
    assert c["args"][:2] == ["inferplane", "control-plane"]
    assert "tcpSocket" in c["readinessProbe"]  # only the leader listens
    assert "livenessProbe" not in c  # a waiting standby is alive
    env = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in c["env"]}
    assert env["INFERPLANE_DATABASE_URL"] == "database-url"  # PostgreSQL: the advisory lock


def test_only_inferplane_and_prometheus_reach_engines(objects):
    policy = one(objects, "NetworkPolicy", "engines-from-inferplane-only")
    engines = [w for kind in ("Deployment", "StatefulSet") for w in of_kind(objects, kind)
               if pod_labels(w).get("app.kubernetes.io/component") == "engine"]
    assert len(engines) == 3
    assert all(selects(policy["spec"]["podSelector"], pod_labels(w)) for w in engines)
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    same_namespace = [p["podSelector"] for p in peers if "namespaceSelector" not in p]
    gateway = pod_labels(one(objects, "Deployment", "inferplane-gateway"))
    plane = pod_labels(one(objects, "Deployment", "inferplane-control-plane"))
    assert any(selects(s, gateway) for s in same_namespace)
    assert any(selects(s, plane) for s in same_namespace)
    assert not any(selects(s, {"app": "other"}) for s in same_namespace)
    assert not any(selects(s, pod_labels(e)) for s in same_namespace for e in engines)


def test_monitoring_objects_produce_the_jobs_the_rules_select(objects):
    rules_text = "\n".join(r["spec"]["groups"].__repr__() for r in of_kind(objects, "PrometheusRule"))
    for monitor, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        for obj in of_kind(objects, monitor):
            job = next(r["replacement"] for r in obj["spec"][key][0]["relabelings"]
                       if r["targetLabel"] == "job")
            if job != "inferplane-control-plane":  # its series carry no job selector
                assert f'job="{job}"' in rules_text, job
    monitor = one(objects, "ServiceMonitor", "inferplane-gateway")
    service = one(objects, "Service", "inferplane-gateway-metrics")
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert service["spec"]["clusterIP"] == "None"  # every replica scraped, not one at random


def test_cold_tier_scales_to_zero_on_the_queue_depth(objects):
    cold = one(objects, "Deployment", "engine-cold")
    scaled = one(objects, "ScaledObject", "engine-cold")
    assert cold["spec"]["replicas"] == 0 and scaled["spec"]["minReplicaCount"] == 0
    assert scaled["spec"]["scaleTargetRef"]["name"] == "engine-cold"
    model = pod_labels(cold)["inferplane.io/model"]
    queries = {t["name"]: t["metadata"]["query"] for t in scaled["spec"]["triggers"]}
    assert Metric.QUEUE_DEPTH in metric_names_in(queries["queue-depth"])
    for query in queries.values():
        assert f'model="{model}"' in query
        assert all(is_exported(n, DOCUMENTED_METRICS) for n in metric_names_in(query)), query


def test_keda_queries_parse_with_promtool(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install the Debian package `prometheus` (make tools)"
    scaled = one(build("production"), "ScaledObject", "engine-cold")
    records = [{"record": f"keda:{t['name'].replace('-', '_')}", "expr": t["metadata"]["query"]}
               for t in scaled["spec"]["triggers"]]
    (tmp_path / "keda.yml").write_text(yaml.safe_dump({"groups": [{"name": "keda",
                                                                   "rules": records}]}))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "keda.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _backend_targets(objects) -> set[str]:
    """Host names the cluster DNS gives: Services, and pod-N.service for StatefulSets."""
    hosts = {s["metadata"]["name"] for s in of_kind(objects, "Service")}
    for sts in of_kind(objects, "StatefulSet"):
        hosts |= {f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}"
                  for i in range(sts["spec"]["replicas"])}
    return hosts


def test_settings_file_loads_and_every_backend_exists(objects, tmp_path, monkeypatch):
    (config,) = [c for c in of_kind(objects, "ConfigMap")
                 if c["metadata"]["name"].startswith("inferplane-config")]
    monkeypatch.setenv("INFERPLANE_DATABASE_URL", "postgresql://u@inferplane-postgres/inferplane")
    monkeypatch.setenv("INFERPLANE_REDIS_URL", "redis://inferplane-redis:6379/0")
    (tmp_path / "inferplane.yaml").write_text(config["data"]["inferplane.yaml"])
    settings = load_settings(tmp_path / "inferplane.yaml")
    assert settings.database_url.startswith("postgresql://")
    assert {m.tier for m in settings.models} == {"hot", "warm", "cold"}
    targets = _backend_targets(objects)
    for model in settings.models:
        assert model.backends, model.name
        for backend in model.backends:
            assert urlsplit(backend.url).hostname in targets, backend.url
    mounted = {v["configMap"]["name"] for w in of_kind(objects, "Deployment")
               for v in w["spec"]["template"]["spec"].get("volumes", []) if "configMap" in v}
    assert mounted == {config["metadata"]["name"]}


def test_engine_pods_carry_the_model_label_the_alerts_group_by(objects):
    monitor = one(objects, "PodMonitor", "inferplane-engines")
    relabel = {r["targetLabel"]: r.get("sourceLabels") for r in
               monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    (source,) = relabel["model"]
    pod_label = re.sub(r"[^a-z0-9]", "_", "inferplane.io/model")
    assert source == f"__meta_kubernetes_pod_label_{pod_label}"
    for kind in ("Deployment", "StatefulSet"):
        for w in of_kind(objects, kind):
            if pod_labels(w).get("app.kubernetes.io/component") == "engine":
                assert pod_labels(w)["inferplane.io/model"], w["metadata"]["name"]

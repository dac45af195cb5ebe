"""Structural JSON Schemas for the custom resources in deploy/kubernetes/, used offline.

kubernetes-validate knows only built-in kinds. These schemas follow the CRDs'
openAPIV3Schema for the fields the manifests use (Prometheus Operator v1 ServiceMonitor,
PodMonitor, PrometheusRule; KEDA v1alpha1 ScaledObject) and refuse any other field, so a typo
or a field in the wrong place fails here instead of being pruned silently by the API server.
"""
from __future__ import annotations


def _obj(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


STRING = {"type": "string"}
DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
            r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": STRING}
METADATA = _obj({"name": STRING, "namespace": STRING, "labels": STRING_MAP,
                 "annotations": STRING_MAP}, ("name",))
LABEL_SELECTOR = _obj({"matchLabels": STRING_MAP, "matchExpressions": {"type": "array"}})
RELABELING = _obj({
    "sourceLabels": {"type": "array", "items": {"type": "string",
                                                "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    "separator": STRING, "targetLabel": STRING, "regex": STRING, "modulus": {"type": "integer"},
    "replacement": STRING,
    "action": {"enum": ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop",
                        "labelkeep", "lowercase", "uppercase", "keepequal", "dropequal"]},
})
ENDPOINT = _obj({"port": STRING, "path": STRING, "interval": DURATION,
                 "scrapeTimeout": DURATION, "scheme": {"enum": ["http", "https"]},
                 "relabelings": {"type": "array", "items": RELABELING},
                 "metricRelabelings": {"type": "array", "items": RELABELING}})
RULE = _obj({"record": STRING, "alert": STRING, "expr": STRING, "for": DURATION,
             "keep_firing_for": DURATION, "labels": STRING_MAP, "annotations": STRING_MAP},
            ("expr",))
RULE["oneOf"] = [{"required": ["record"]}, {"required": ["alert"]}]
RULE_GROUP = _obj({"name": STRING, "interval": DURATION, "limit": {"type": "integer"},
                   "rules": {"type": "array", "items": RULE, "minItems": 1}}, ("name", "rules"))


def _resource(api_version: str, kind: str, spec: dict) -> dict:
    return _obj({"apiVersion": {"const": api_version}, "kind": {"const": kind},
                 "metadata": METADATA, "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))


SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _resource(
        "monitoring.coreos.com/v1", "ServiceMonitor", _obj({
            "selector": LABEL_SELECTOR, "jobLabel": STRING,
            "namespaceSelector": _obj({"any": {"type": "boolean"},
                                       "matchNames": {"type": "array", "items": STRING}}),
            "endpoints": {"type": "array", "items": ENDPOINT, "minItems": 1},
        }, ("selector", "endpoints"))),
    ("monitoring.coreos.com/v1", "PodMonitor"): _resource(
        "monitoring.coreos.com/v1", "PodMonitor", _obj({
            "selector": LABEL_SELECTOR, "jobLabel": STRING,
            "podMetricsEndpoints": {"type": "array", "items": ENDPOINT, "minItems": 1},
        }, ("selector", "podMetricsEndpoints"))),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _resource(
        "monitoring.coreos.com/v1", "PrometheusRule", _obj({
            "groups": {"type": "array", "items": RULE_GROUP, "minItems": 1},
        }, ("groups",))),
    ("keda.sh/v1alpha1", "ScaledObject"): _resource(
        "keda.sh/v1alpha1", "ScaledObject", _obj({
            "scaleTargetRef": _obj({"apiVersion": STRING, "kind": STRING, "name": STRING,
                                    "envSourceContainerName": STRING}, ("name",)),
            "pollingInterval": {"type": "integer", "minimum": 1},
            "cooldownPeriod": {"type": "integer", "minimum": 0},
            "idleReplicaCount": {"type": "integer", "minimum": 0},
            "minReplicaCount": {"type": "integer", "minimum": 0},
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "triggers": {"type": "array", "minItems": 1, "items": _obj({
                "type": {"const": "prometheus"}, "name": STRING,
                "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                "metadata": _obj({
                    "serverAddress": {"type": "string", "pattern": "^https?://"},
                    "query": STRING,
                    # KEDA reads trigger metadata as strings: a bare number is refused
                    "threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
                    "activationThreshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
                    "namespace": STRING, "ignoreNullValues": STRING,
                }, ("serverAddress", "query", "threshold")),
            }, ("type", "metadata"))},
        }, ("scaleTargetRef", "triggers"))),
}

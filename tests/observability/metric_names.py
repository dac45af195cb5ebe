"""Find every metric name that dashboards and rule files reference, and check it is exported.

PromQL is scanned with regular expressions rather than parsed: strings, label
matchers, range selectors and grouping clauses are removed first, so what is
left are function names (followed by "("), keywords, numbers and metric names.
Names produced by recording rules are not exported by any process and are
skipped, as are the series Prometheus itself creates (up, ALERTS).

    python tests/observability/metric_names.py [exposition.txt ...]

prints referenced names missing from the documented list, or from the names
found in the given /metrics dumps when files are passed.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "dashboards"
RULE_DIR = ROOT / "alerts"

GATEWAY_METRICS = frozenset({
    "inferplane_requests_total", "inferplane_request_duration_seconds",
    "inferplane_time_to_first_token_seconds", "inferplane_time_per_output_token_seconds",
    "inferplane_inter_token_latency_seconds", "inferplane_tokens_total",
    "inferplane_queue_depth", "inferplane_queue_wait_seconds", "inferplane_rejections_total",
    "inferplane_circuit_breaker_state", "inferplane_routing_decisions_total",
    "inferplane_prefix_cache_hit_estimate", "inferplane_prefix_lookup_tokens_total",
    "inferplane_prefix_hit_tokens_total", "inferplane_upstream_errors_total",
    "inferplane_spend_usd_total", "inferplane_retries_total",
    "inferplane_fallbacks_total", "inferplane_stream_resumes_total", "inferplane_inflight_requests",
    "inferplane_shadow_requests_total", "inferplane_shadow_similarity",
    "inferplane_cache_requests_total", "inferplane_cache_entries",
    "inferplane_cache_lookup_seconds", "inferplane_guardrail_actions_total",
})
CONTROL_PLANE_METRICS = frozenset({
    "inferplane_backend_healthy",
    "inferplane_rollout_state", "inferplane_rollout_step_started_timestamp_seconds",
    "inferplane_slo_error_budget_remaining",
})
ENGINE_METRICS = frozenset({
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_success_total", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens", "vllm:iteration_tokens_total", "vllm:cache_config_info",
})
DOCUMENTED_METRICS = GATEWAY_METRICS | CONTROL_PLANE_METRICS | ENGINE_METRICS
PROMETHEUS_SERIES = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})
SAMPLE_SUFFIXES = ("_bucket", "_sum", "_count", "_created")

KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
    "count_values", "bottomk", "topk", "quantile", "inf", "nan", "atan2",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{?\w+(?::\w+)?\}?")
_LABEL_VALUES = re.compile(r"\blabel_values\s*\(\s*([^,()]*(?:\{[^}]*\})?)\s*(?:,\s*\w+\s*)?\)")
_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-zA-Z]*|\.\d+|([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names_in(expr: str) -> set[str]:
    """Metric names referenced by one PromQL expression (or Grafana variable query)."""
    text = _LABEL_VALUES.sub(r"\1", expr)
    text = _STRING.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _TOKEN.finditer(text):
        name, call = match.group(1), match.group(2)
        if name and not call and name not in KEYWORDS:
            names.add(name)
    return names


def dashboard_exprs(directory: Path = DASHBOARD_DIR) -> dict[str, list[str]]:
    """{dashboard file: [every target expr and variable query]}."""
    out = {}
    for path in sorted(directory.glob("*.json")):
        board = json.loads(path.read_text())
        exprs = [t["expr"] for p in board.get("panels", []) for t in p.get("targets", [])]
        exprs += [v["query"] for v in board["templating"]["list"] if v.get("type") == "query"]
        out[path.name] = exprs
    return out


def rules(directory: Path = RULE_DIR) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def recorded_names(rule_list: list[dict]) -> set[str]:
    return {rule["record"] for rule in rule_list if "record" in rule}


def referenced_metrics() -> set[str]:
    """Every exported metric the dashboards and rules depend on."""
    rule_list = rules()
    exprs = [rule["expr"] for rule in rule_list]
    exprs += [e for board in dashboard_exprs().values() for e in board]
    names = set().union(*(metric_names_in(e) for e in exprs))
    return names - recorded_names(rule_list) - PROMETHEUS_SERIES


def is_exported(name: str, exported: set[str] | frozenset[str]) -> bool:
    if name in exported:
        return True
    return any(name.endswith(s) and name[: -len(s)] in exported for s in SAMPLE_SUFFIXES)


def missing_metrics(exported: set[str] | frozenset[str] = DOCUMENTED_METRICS) -> set[str]:
    return {name for name in referenced_metrics() if not is_exported(name, exported)}


# Sample names a family of each type exposes, even before its first labelled child exists.
TYPE_SUFFIXES = {"counter": ("_total",), "histogram": ("", "_bucket", "_sum", "_count"),
                 "summary": ("", "_sum", "_count"), "info": ("_info",)}


def names_from_exposition(text: str) -> set[str]:
    """Family and sample names in a Prometheus text exposition (a /metrics body)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in TYPE_SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def names_with_samples(text: str) -> set[str]:
    """Family and sample names that have at least one series: what a query can see. A family
    declared without any labelled child is absent for PromQL, however its HELP reads."""
    names = set()
    for family in text_string_to_metric_families(text):
        if family.samples:
            names.add(family.name)
            names.update(sample.name for sample in family.samples)
    return names


def main(paths: list[str]) -> int:
    exported: set[str] | frozenset[str] = DOCUMENTED_METRICS
    if paths:
        exported = set().union(*(names_from_exposition(Path(p).read_text()) for p in paths))
    missing = sorted(missing_metrics(exported))
    for name in missing:
        print(name)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

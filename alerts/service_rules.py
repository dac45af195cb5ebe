"""Symptom and cause alerts for the gateway, the engine fleet and rollouts."""
from __future__ import annotations

from rule_model import ENGINE_JOB, GATEWAY_JOB, Alert, RuleConfig, group, number

from common.metric_names import EngineMetric, Metric
from common.vocabulary import BreakerState, RolloutPhase

GW = f'job="{GATEWAY_JOB}"'
ENGINE = f'job="{ENGINE_JOB}"'
# Rejection reasons that mean "a caller hit its quota", as opposed to overload.
RATE_LIMIT_REASONS = "rate_limit|rpm|tpm|budget"
BREAKER_OPEN = BreakerState.OPEN.code
ROLLOUT_PROGRESSING, ROLLOUT_ABORTING = RolloutPhase.PROGRESSING.code, RolloutPhase.ABORTING.code


def gateway_alerts(config: RuleConfig) -> list[Alert]:
    rejections = (f'sum by (model) (rate({Metric.REJECTIONS.total}{{{GW},'
                  f'reason=~"{RATE_LIMIT_REASONS}"}}[5m]))')
    requests = f"sum by (model) (rate({Metric.REQUESTS.total}{{{GW}}}[5m]))"
    return [
        Alert(
            name="InferplaneGatewayDown", expr=f"up{{{GW}}} == 0", for_="2m", severity="page",
            summary="Gateway {{ $labels.instance }} is not answering scrapes",
            description="Prometheus could not scrape {{ $labels.instance }} for 2 minutes.",
        ),
        Alert(
            name="InferplaneNoHealthyBackend",
            # No job selector: the control plane's health prober exports it (under
            # `inferplane up` the gateway's job does).
            expr=f"max by (model) ({Metric.BACKEND_HEALTHY}) == 0",
            for_="1m", severity="page",
            summary="Model {{ $labels.model }} has no healthy backend",
            description=("Every backend of {{ $labels.model }} fails its health check; requests "
                         "can only succeed through fallback models."),
        ),
        Alert(
            name="InferplaneCircuitBreakerOpen",
            expr=(f"max by (backend) (max_over_time({Metric.CIRCUIT_BREAKER_STATE}{{{GW}}}[5m]))"
                  f" == {BREAKER_OPEN}"),
            for_="5m", severity="ticket",
            summary="Circuit breaker for backend {{ $labels.backend }} keeps opening",
            description=("The breaker of {{ $labels.backend }} has been open within every 5 minute "
                         "window for 5 minutes; traffic goes to the other backends."),
        ),
        backend_errors_alert(config),
        Alert(
            name="InferplaneQueueBuildup",
            expr=f"sum by (model) ({Metric.QUEUE_DEPTH}{{{GW}}}) > {config.queue_depth_threshold}",
            for_="5m", severity="ticket",
            summary="Admission queue of {{ $labels.model }} keeps growing",
            description=("{{ $value }} requests of {{ $labels.model }} wait in the gateway "
                         f"admission queue (threshold {config.queue_depth_threshold}) for 5 "
                         "minutes; the model needs more capacity."),
        ),
        Alert(
            name="InferplaneHighRateLimitRejections",
            expr=f"{rejections}\n/\n{requests}\n> {number(config.rejection_ratio_threshold)}\n",
            for_="10m", severity="ticket",
            summary="Many requests to {{ $labels.model }} are rejected by quotas",
            description=("{{ $value | humanizePercentage }} of the requests to {{ $labels.model }} "
                         "hit RPM/TPM/budget limits; check for a runaway client or limits "
                         "that are too tight."),
        ),
    ]


def backend_errors_alert(config: RuleConfig) -> Alert:
    # The cause behind a burn: which backend fails. Client 4xx and client disconnects say
    # nothing about the engine. Errors per routed request: a backend whose breaker is open
    # gets no picks, so the ratio goes to +Inf and keeps firing while it errs.
    errors = (f'sum by (model, backend) (rate({Metric.UPSTREAM_ERRORS.total}{{{GW},'
              f'kind!~"http_4xx|aborted"}}[5m]))')
    picks = f"sum by (backend) (rate({Metric.ROUTING_DECISIONS.total}{{{GW}}}[5m]))"
    threshold = number(config.backend_error_ratio_threshold)
    return Alert(
        name="InferplaneBackendErrors",
        expr=f"{errors}\n/ on (backend) group_left\n{picks}\n> {threshold}\n",
        for_="5m", severity="ticket",
        summary="Backend {{ $labels.backend }} of {{ $labels.model }} fails requests",
        description=("{{ $value | humanizePercentage }} of the requests routed to backend "
                     "{{ $labels.backend }} fail upstream (connect, timeout, 5xx, broken "
                     f"streams; threshold {config.backend_error_ratio_threshold:.0%}); retries "
                     "and the breaker hide it from clients only while other backends have room."),
    )


def engine_alerts(config: RuleConfig) -> list[Alert]:
    return [
        Alert(
            name="InferplaneEngineDown", expr=f"up{{{ENGINE}}} == 0", for_="2m", severity="page",
            summary="Engine {{ $labels.instance }} is down",
            description="Prometheus could not scrape engine {{ $labels.instance }} for 2 minutes.",
        ),
        Alert(
            name="InferplaneKVCacheSaturated",
            expr=(f"{EngineMetric.KV_CACHE_USAGE_PERC}{{{ENGINE}}} > {number(config.kv_usage_threshold)}\n"
                  f"and\nvllm:num_requests_waiting{{{ENGINE}}} > 0\n"),
            for_="10m", severity="ticket",
            summary="KV cache of {{ $labels.model_name }} on {{ $labels.instance }} is full",
            description=("KV cache usage has stayed above "
                         f"{config.kv_usage_threshold:.0%} with requests waiting for "
                         "10 minutes; expect preemptions and rising TTFT."),
        ),
    ]


def rollout_alerts(config: RuleConfig) -> list[Alert]:
    return [
        Alert(
            name="InferplaneRolloutStuck",
            expr=(f"(time() - {Metric.ROLLOUT_STEP_STARTED}) "
                  f"> {config.rollout_step_timeout_s}\n"
                  f"and on (model, rollout)\n"
                  f"({Metric.ROLLOUT_STATE} == {ROLLOUT_PROGRESSING} "
                  f"or {Metric.ROLLOUT_STATE} == {ROLLOUT_ABORTING})\n"),
            for_="5m", severity="ticket",
            summary="Rollout {{ $labels.rollout }} of {{ $labels.model }} is stuck",
            description=("The current step of rollout {{ $labels.rollout }} started "
                         "{{ $value | humanizeDuration }} ago and has not advanced."),
        ),
    ]


def service_rule_files(config: RuleConfig) -> dict[str, dict]:
    def as_file(name: str, alerts: list[Alert]) -> dict:
        return {"groups": [group(name, [a.to_rule(config) for a in alerts])]}

    return {
        "gateway.rules.yml": as_file("inferplane-gateway-alerts", gateway_alerts(config)),
        "engine.rules.yml": as_file("inferplane-engine-alerts", engine_alerts(config)),
        "rollouts.rules.yml": as_file("inferplane-rollout-alerts", rollout_alerts(config)),
    }

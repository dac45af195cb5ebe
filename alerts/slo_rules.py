"""Availability SLIs, multi-window multi-burn-rate alerts and latency SLO alerts.

The burn-rate pairs follow the SRE workbook (chapter "Alerting on SLOs"): a
long window proves the budget is really burning, a short window (1/12 of it)
makes the alert stop soon after the burning stops.
"""
from __future__ import annotations

from rule_model import GATEWAY_JOB, Alert, RuleConfig, group, number, record

from common.metric_names import Metric

SLI_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
REQUESTS = f'{Metric.REQUESTS.total}{{job="{GATEWAY_JOB}"}}'
ERRORS = f'{Metric.REQUESTS.total}{{job="{GATEWAY_JOB}",code=~"5.."}}'

# (alert name, burn factor, long window, short window, for, severity)
BURN_RATE_ALERTS = (
    ("InferplaneErrorBudgetBurnFast", 14.4, "1h", "5m", "2m", "page"),
    ("InferplaneErrorBudgetBurnMedium", 6.0, "6h", "30m", "15m", "page"),
    ("InferplaneErrorBudgetBurnSlow", 3.0, "1d", "2h", "1h", "ticket"),
    ("InferplaneErrorBudgetBurnVerySlow", 1.0, "3d", "6h", "3h", "ticket"),
)

LATENCY_HISTOGRAMS = (
    ("ttft", Metric.TIME_TO_FIRST_TOKEN),
    ("tpot", Metric.TIME_PER_OUTPUT_TOKEN),
    ("request_duration", Metric.REQUEST_DURATION),
)


def error_ratio_expr(window: str) -> str:
    # `or ... * 0` keeps a 0 ratio for models that have traffic but no 5xx yet,
    # otherwise the SLI series would vanish instead of reading 0.
    total = f"sum by (model) (rate({REQUESTS}[{window}]))"
    errors = f"sum by (model) (rate({ERRORS}[{window}]))"
    return f"(\n  {errors}\n  or\n  {total} * 0\n)\n/\n{total}\n"


def sli_records(config: RuleConfig) -> list[dict]:
    rules = [record("inferplane:slo_objective:ratio", f"vector({number(config.objective)})",
                    {"slo": "availability"})]
    for window in SLI_WINDOWS:
        rules.append(record(f"inferplane:sli_error_ratio:rate{window}", error_ratio_expr(window)))
    for window in SLI_WINDOWS:
        rules.append(record(
            f"inferplane:slo_burn_rate:rate{window}",
            f"inferplane:sli_error_ratio:rate{window} / {number(config.error_budget)}",
        ))
    return rules


def latency_records(config: RuleConfig) -> list[dict]:
    # The thresholds are recorded too, so dashboards draw the SLO line from one source.
    rules = [
        record("inferplane:slo_latency_threshold:seconds", f"vector({number(seconds)})",
               {"slo": slo})
        for slo, seconds in (("ttft", config.ttft_p95_slo_s), ("tpot", config.tpot_p95_slo_s))
    ]
    for short, metric in LATENCY_HISTOGRAMS:
        for quantile in (0.5, 0.95, 0.99):
            name = f"inferplane:{short}_seconds:p{int(quantile * 100)}_rate5m"
            expr = (f"histogram_quantile({quantile}, sum by (model, le) "
                    f'(rate({metric}_bucket{{job="{GATEWAY_JOB}"}}[5m])))')
            rules.append(record(name, expr))
    return rules


def burn_rate_alert(config: RuleConfig, name, factor, long_w, short_w, for_, severity) -> Alert:
    threshold = number(factor * config.error_budget)
    expr = (f"inferplane:sli_error_ratio:rate{long_w} > {threshold}\n"
            f"and\ninferplane:sli_error_ratio:rate{short_w} > {threshold}\n")
    return Alert(
        name=name, expr=expr, for_=for_, severity=severity,
        labels={"slo": "availability", "long_window": long_w, "short_window": short_w},
        summary=(f"Model {{{{ $labels.model }}}} burns its availability error budget "
                 f"{number(factor)}x faster than sustainable"),
        description=(f"The 5xx ratio of {{{{ $labels.model }}}} is {{{{ $value | humanizePercentage }}}} "
                     f"over {long_w} and above {threshold} over {short_w} too "
                     f"(objective {number(config.objective)})."),
    )


def latency_alert(name: str, short: str, label: str, slo_s: float) -> Alert:
    return Alert(
        name=name,
        expr=f"inferplane:{short}_seconds:p95_rate5m > {number(slo_s)}",
        for_="10m", severity="ticket", labels={"slo": short},
        summary=f"{label} P95 of {{{{ $labels.model }}}} is over its {number(slo_s)}s SLO",
        description=(f"{label} P95 of {{{{ $labels.model }}}} has been "
                     f"{{{{ $value | humanizeDuration }}}} for 10 minutes (SLO {number(slo_s)}s)."),
    )


def slo_alerts(config: RuleConfig) -> list[Alert]:
    alerts = [burn_rate_alert(config, *spec) for spec in BURN_RATE_ALERTS]
    alerts.append(Alert(
        name="InferplaneErrorBudgetExhausted",
        expr=f"{Metric.SLO_ERROR_BUDGET_REMAINING} <= 0",
        for_="15m", severity="ticket",
        summary="Error budget of {{ $labels.model }} ({{ $labels.slo }}) is spent",
        description=("The control plane reports {{ $value | humanizePercentage }} of the "
                     "{{ $labels.slo }} error budget left for {{ $labels.model }}; freeze risky "
                     "rollouts until it recovers."),
    ))
    alerts.append(latency_alert("InferplaneTTFTP95OverSLO", "ttft", "Time to first token",
                                config.ttft_p95_slo_s))
    alerts.append(latency_alert("InferplaneTPOTP95OverSLO", "tpot", "Time per output token",
                                config.tpot_p95_slo_s))
    return alerts


def slo_rule_file(config: RuleConfig) -> dict:
    return {"groups": [
        group("inferplane-slo-sli", sli_records(config)),
        group("inferplane-latency-sli", latency_records(config)),
        group("inferplane-slo-alerts", [a.to_rule(config) for a in slo_alerts(config)]),
    ]}

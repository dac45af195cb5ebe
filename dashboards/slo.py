"""SLO: availability against its objective, error budget and multi-window burn rates.

Reads the recording rules of alerts/slo.rules.yml, so the numbers on the
dashboard are exactly the ones the burn-rate alerts evaluate.
"""
from __future__ import annotations

from grafana import RATE, dashboard, query_variable, stat, table, target, timeseries

from common.metric_names import Metric

MODEL = 'model=~"$model"'
RAW = 'job=~"$job", instance=~"$instance", model=~"$model"'
PAGE_WINDOWS = ("5m", "30m", "1h", "6h")
TICKET_WINDOWS = ("2h", "6h", "1d", "3d")


def variables() -> list[dict]:
    return [
        query_variable("job", "Job", f"label_values({Metric.REQUESTS.total}, job)",
                       default="inferplane-gateway", multi=False),
        query_variable("instance", "Instance",
                       f'label_values({Metric.REQUESTS.total}{{job=~"$job"}}, instance)'),
        query_variable("model", "Model", "label_values(inferplane:sli_error_ratio:rate5m, model)"),
    ]


def burn_rate_panel(title: str, windows: tuple[str, ...], thresholds) -> dict:
    return timeseries(
        title, "Error ratio divided by the error budget (1 − objective); 1× spends the budget "
        "exactly over the SLO period. Dashed lines mark the alert thresholds.", "suffix:×",
        [target(f"inferplane:slo_burn_rate:rate{w}{{{MODEL}}}", f"{w} {{{{model}}}}")
         for w in windows],
        min_value=0, thresholds=thresholds)


def summary_panels() -> list[dict]:
    good = [(0, "red"), (0.99, "orange"), (0.999, "green")]
    return [
        stat("Objective", "Availability objective the rules were generated with.",
             "percentunit", [target("inferplane:slo_objective:ratio")]),
        stat("Availability, last 1d", "1 − 5xx ratio over one day, per model.", "percentunit",
             [target(f"1 - inferplane:sli_error_ratio:rate1d{{{MODEL}}}", "{{model}}")],
             thresholds=good),
        stat("Availability, last 3d", "1 − 5xx ratio over three days, per model.", "percentunit",
             [target(f"1 - inferplane:sli_error_ratio:rate3d{{{MODEL}}}", "{{model}}")],
             thresholds=good),
        stat("Error budget remaining", "Budget left in the SLO period, as tracked by the "
             "control plane.", "percentunit",
             [target(f'{Metric.SLO_ERROR_BUDGET_REMAINING}{{{MODEL}, slo="availability"}}',
                     "{{model}}")],
             thresholds=[(0, "red"), (0.25, "orange"), (0.5, "green")]),
    ]


def trend_panels() -> list[dict]:
    return [
        timeseries("Error ratio against the budget", "5xx ratio over 5m and 1h; the dashed "
                   "budget line is 1 − objective.", "percentunit",
                   [target(f"inferplane:sli_error_ratio:rate5m{{{MODEL}}}", "5m {{model}}"),
                    target(f"inferplane:sli_error_ratio:rate1h{{{MODEL}}}", "1h {{model}}"),
                    target("1 - inferplane:slo_objective:ratio", "budget")], min_value=0),
        timeseries("Error budget remaining over time", "Remaining budget per SLO, as tracked by "
                   "the control plane.", "percentunit",
                   [target(f"{Metric.SLO_ERROR_BUDGET_REMAINING}{{{MODEL}}}",
                           "{{model}} {{slo}}")]),
        burn_rate_panel("Burn rate, paging windows", PAGE_WINDOWS,
                        [(0, "green"), (6, "orange"), (14.4, "red")]),
        burn_rate_panel("Burn rate, ticket windows", TICKET_WINDOWS,
                        [(0, "green"), (1, "orange"), (3, "red")]),
    ]


def latency_panels() -> list[dict]:
    def versus_slo(title: str, short: str) -> dict:
        return timeseries(
            title, f"P95 over 5m per model against the {short.upper()} SLO threshold.", "s",
            [target(f"inferplane:{short}_seconds:p95_rate5m{{{MODEL}}}", "P95 {{model}}"),
             target(f'inferplane:slo_latency_threshold:seconds{{slo="{short}"}}', "SLO")],
            min_value=0)

    return [
        versus_slo("Time to first token P95 vs SLO", "ttft"),
        versus_slo("Time per output token P95 vs SLO", "tpot"),
        timeseries("5xx responses by code", "Raw 5xx rate from the selected gateway instances.",
                   "reqps",
                   [target(f'sum by (code) (rate({Metric.REQUESTS.total}{{{RAW}, code=~"5.."}}'
                           f"[{RATE}]))", "{{code}}")], stack=True),
        table("Firing SLO alerts", "Alerts with an slo label that are firing now.", "none",
              [target('ALERTS{alertstate="firing", slo!=""}', instant=True, table=True)],
              width=12),
    ]


def build() -> dict:
    return dashboard("inferplane-slo", "Inferplane / SLO",
                     "Availability and latency SLOs, error budget and burn rates per model.",
                     variables(), summary_panels() + trend_panels() + latency_panels(),
                     tags=("slo",))

"""Rollouts: rollout state and a side-by-side comparison of model versions."""
from __future__ import annotations

from grafana import (RATE, dashboard, quantiles, query_variable, state_timeline, target,
                      timeseries, value_mappings)

from common.metric_names import Metric
from common.vocabulary import RolloutPhase

SEL = 'job=~"$job", instance=~"$instance", model=~"$model"'
PHASE_COLOURS = {
    RolloutPhase.PENDING: "blue", RolloutPhase.PROGRESSING: "yellow", RolloutPhase.PAUSED: "orange",
    RolloutPhase.PROMOTING: "purple", RolloutPhase.SUCCEEDED: "green",
    RolloutPhase.ABORTING: "red", RolloutPhase.ROLLED_BACK: "dark-red",
}
ROLLOUT_STATES = {phase.code: (phase.label, colour) for phase, colour in PHASE_COLOURS.items()}


def variables() -> list[dict]:
    return [
        query_variable("job", "Job", f"label_values({Metric.REQUESTS.total}, job)",
                       default="inferplane-gateway", multi=False),
        query_variable("instance", "Instance",
                       f'label_values({Metric.REQUESTS.total}{{job=~"$job"}}, instance)'),
        query_variable("model", "Model",
                       f'label_values({Metric.REQUESTS.total}{{job=~"$job"}}, model)'),
    ]


def by_version(metric: str, extra: str = "") -> str:
    selector = f"{SEL}, {extra}" if extra else SEL
    return f"sum by (model, version) (rate({metric}{{{selector}}}[{RATE}]))"


def state_panels() -> list[dict]:
    return [
        state_timeline("Rollout state", "Phase of each rollout over time.",
                       [target(f'max by (model, rollout) ({Metric.ROLLOUT_STATE}{{model=~"$model"}})',
                               "{{model}} {{rollout}}")],
                       value_mappings(ROLLOUT_STATES)),
        timeseries("Time in current step", "Seconds since the current rollout step started; "
                   "InferplaneRolloutStuck fires after one hour.", "s",
                   [target("time() - max by (model, rollout) "
                           f'({Metric.ROLLOUT_STEP_STARTED}{{model=~"$model"}})',
                           "{{model}} {{rollout}}")]),
        timeseries("Error budget remaining", "Budget left per SLO while the rollout runs.",
                   "percentunit",
                   [target(f'{Metric.SLO_ERROR_BUDGET_REMAINING}{{model=~"$model"}}',
                           "{{model}} {{slo}}")]),
    ]


def comparison_panels() -> list[dict]:
    requests = by_version(Metric.REQUESTS.total)
    errors = by_version(Metric.REQUESTS.total, 'code=~"5.."')
    return [
        timeseries("Traffic share by version", "Share of the model's requests each version "
                   "receives (the canary weight in practice).", "percentunit",
                   [target(f"{requests} / ignoring (version) group_left "
                           f"sum by (model) (rate({Metric.REQUESTS.total}{{{SEL}}}[{RATE}]))",
                           "{{model}} {{version}}")], min_value=0, max_value=1, stack=True),
        timeseries("Requests per second by version", "Request rate per version.", "reqps",
                   [target(requests, "{{model}} {{version}}")]),
        timeseries("5xx ratio by version", "Share of 5xx responses per version.", "percentunit",
                   [target(f"{errors} / {requests}", "{{model}} {{version}}")], min_value=0),
        timeseries("Latency P95 by version", "Request duration P95 per version.", "s",
                   quantiles(Metric.REQUEST_DURATION, SEL, "model, version",
                             qs=(0.95,))),
        timeseries("TTFT P95 by version", "Time to first token P95 per version.", "s",
                   quantiles(Metric.TIME_TO_FIRST_TOKEN, SEL, "model, version",
                             qs=(0.95,))),
        timeseries("TPOT P95 by version", "Time per output token P95 per version.", "s",
                   quantiles(Metric.TIME_PER_OUTPUT_TOKEN, SEL, "model, version",
                             qs=(0.95,))),
        timeseries("Completion tokens per second by version", "Generated tokens per version.",
                   "suffix: tok/s",
                   [target(f"sum by (model, version) (rate({Metric.TOKENS.total}{{{SEL}, "
                           f'kind="completion"}}[{RATE}]))', "{{model}} {{version}}")]),
    ]


def shadow_panels() -> list[dict]:
    return [
        timeseries("Shadow requests by outcome", "Copies of live traffic sent to the shadow "
                   "version and how they ended.", "reqps",
                   [target(f"sum by (version, outcome) (rate({Metric.SHADOW_REQUESTS.total}"
                           f"{{{SEL}}}[{RATE}]))", "{{version}} {{outcome}}")], stack=True),
        timeseries("Shadow answer similarity", "Similarity between live and shadow answers "
                   "(1 = identical); the P10 shows the worst answers.", "percentunit",
                   quantiles(Metric.SHADOW_SIMILARITY, 'model=~"$model"', "model",
                             qs=(0.1, 0.5)), min_value=0, max_value=1),
    ]


def build() -> dict:
    return dashboard("inferplane-rollouts", "Inferplane / Rollouts",
                     "Rollout progress and the error and latency of each model version.",
                     variables(), state_panels() + comparison_panels() + shadow_panels(),
                     tags=("rollouts",))

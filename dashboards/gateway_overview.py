"""Gateway overview: traffic, errors, latency, token latency, admission and backends."""
from __future__ import annotations

from grafana import RATE, dashboard, quantiles, query_variable, stat, target, timeseries

from common.metric_names import Metric
from common.vocabulary import BreakerState

SEL = 'job=~"$job", instance=~"$instance", model=~"$model"'
SEL_NO_MODEL = 'job=~"$job", instance=~"$instance"'
# inferplane_backend_healthy comes from the process running the health prober: the control
# plane's own job in production, the gateway's under `inferplane up`.
SEL_MODEL_ONLY = 'model=~"$model"'
BREAKER_COLOURS = {BreakerState.CLOSED: "green", BreakerState.HALF_OPEN: "orange",
                   BreakerState.OPEN: "red"}


def variables() -> list[dict]:
    return [
        query_variable("job", "Job", f"label_values({Metric.REQUESTS.total}, job)",
                       default="inferplane-gateway", multi=False),
        query_variable("instance", "Instance",
                       f'label_values({Metric.REQUESTS.total}{{job=~"$job"}}, instance)'),
        query_variable("model", "Model",
                       f'label_values({Metric.REQUESTS.total}{{job=~"$job"}}, model)'),
    ]


def rate_sum(metric: str, by: str, selector: str = SEL) -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))"


def traffic_panels() -> list[dict]:
    errors = f'sum by (model) (rate({Metric.REQUESTS.total}{{{SEL}, code=~"5.."}}[{RATE}]))'
    return [
        stat("Requests per second", "All requests answered by the selected gateways.", "reqps",
             [target(f"sum(rate({Metric.REQUESTS.total}{{{SEL}}}[{RATE}]))")]),
        stat("5xx ratio", "Share of responses with a 5xx status (the availability SLI).",
             "percentunit",
             [target(f'sum(rate({Metric.REQUESTS.total}{{{SEL}, code=~"5.."}}[{RATE}])) / '
                     f"sum(rate({Metric.REQUESTS.total}{{{SEL}}}[{RATE}]))")],
             thresholds=[(0, "green"), (0.001, "orange"), (0.01, "red")]),
        stat("In-flight requests", "Requests currently being served upstream.", "short",
             [target(f"sum({Metric.INFLIGHT_REQUESTS}{{{SEL}}})")]),
        stat("Queued requests", "Requests waiting in the admission queues.", "short",
             [target(f"sum({Metric.QUEUE_DEPTH}{{{SEL}}})")],
             thresholds=[(0, "green"), (10, "orange"), (50, "red")]),
        timeseries("Requests per second by model", "Request rate per model, all status codes.",
                   "reqps", [target(rate_sum(Metric.REQUESTS.total, "model"), "{{model}}")]),
        timeseries("Responses by status code", "Response rate split by HTTP status code.", "reqps",
                   [target(rate_sum(Metric.REQUESTS.total, "code"), "{{code}}")], stack=True),
        timeseries("5xx ratio by model", "Share of 5xx responses per model.", "percentunit",
                   [target(f"{errors} / {rate_sum(Metric.REQUESTS.total, 'model')}",
                           "{{model}}")], min_value=0),
        timeseries("Tokens per second", "Prompt and completion tokens processed per second.",
                   "suffix: tok/s",
                   [target(rate_sum(Metric.TOKENS.total, "kind"), "{{kind}}")], stack=True),
    ]


def latency_panels() -> list[dict]:
    return [
        timeseries("Request latency", "End-to-end request duration quantiles (P50/P95/P99).", "s",
                   quantiles(Metric.REQUEST_DURATION, SEL)),
        timeseries("Time to first token", "TTFT quantiles: queueing plus prefill until the first "
                   "streamed token.", "s", quantiles(Metric.TIME_TO_FIRST_TOKEN, SEL)),
        timeseries("Time per output token", "TPOT quantiles: decode time per generated token "
                   "after the first.", "s",
                   quantiles(Metric.TIME_PER_OUTPUT_TOKEN, SEL)),
        timeseries("Inter-token latency P95 by model", "95th percentile gap between streamed "
                   "tokens as seen by clients.", "s",
                   quantiles(Metric.INTER_TOKEN_LATENCY, SEL, "model", qs=(0.95,))),
        timeseries("Latency P95 by version", "Request duration P95 per model version.", "s",
                   quantiles(Metric.REQUEST_DURATION, SEL, "model, version",
                             qs=(0.95,))),
    ]


def admission_panels() -> list[dict]:
    return [
        timeseries("Rejections by reason", "Requests refused before reaching a backend "
                   "(rate limits, budget, full queue, timeouts).", "reqps",
                   [target(rate_sum(Metric.REJECTIONS.total, "reason"), "{{reason}}")],
                   stack=True),
        timeseries("Queue depth by priority", "Requests waiting in the admission queue per "
                   "priority class.", "short",
                   [target(f"sum by (priority) ({Metric.QUEUE_DEPTH}{{{SEL}}})",
                           "{{priority}}")], stack=True),
        timeseries("Queue wait P95 by priority", "95th percentile time spent in the admission "
                   "queue.", "s",
                   quantiles(Metric.QUEUE_WAIT, SEL, "priority", qs=(0.95,))),
        timeseries("Spend per hour by team", "Estimated spend rate in USD per hour.",
                   "currencyUSD",
                   [target(f"{rate_sum(Metric.SPEND_USD.total, 'team')} * 3600",
                           "{{team}}")], stack=True),
    ]


def backend_panels() -> list[dict]:
    return [
        timeseries("In-flight requests by backend", "Requests in progress on each backend.",
                   "short", [target(f"sum by (backend) ({Metric.INFLIGHT_REQUESTS}{{{SEL}}})",
                                    "{{backend}}")]),
        timeseries("Routing decisions", "Backends picked by the router, per strategy.", "ops",
                   [target(rate_sum(Metric.ROUTING_DECISIONS.total, "strategy, backend"),
                           "{{strategy}} → {{backend}}")], stack=True),
        timeseries("Upstream errors by backend", "Errors returned by or while talking to "
                   "backends, by kind.", "ops",
                   [target(rate_sum(Metric.UPSTREAM_ERRORS.total, "backend, kind"),
                           "{{backend}} {{kind}}")]),
        timeseries("Retries, fallbacks and resumed streams", "Requests retried on another "
                   "backend, requests served by a fallback model, and streams continued on "
                   "another backend after theirs failed mid-way.", "ops",
                   [target(rate_sum(Metric.RETRIES.total, "model"), "retries {{model}}"),
                    target(rate_sum(Metric.FALLBACKS.total, "model"),
                           "fallbacks {{model}}"),
                    target(rate_sum(Metric.STREAM_RESUMES.total, "model"),
                           "resumed {{model}}")]),
        timeseries("Circuit breaker state", f"{BreakerState.legend()}.", "none",
                   [target(f"max by (backend) ({Metric.CIRCUIT_BREAKER_STATE}{{{SEL_NO_MODEL}}})",
                           "{{backend}}")], min_value=0, max_value=BreakerState.OPEN.code,
                   thresholds=[(s.code, colour) for s, colour in BREAKER_COLOURS.items()]),
        timeseries("Backend health", "1 when the backend passes health checks.", "bool",
                   [target(f"max by (model, backend) ({Metric.BACKEND_HEALTHY}{{{SEL_MODEL_ONLY}}})",
                           "{{model}} {{backend}}")], min_value=0, max_value=1),
        timeseries("Prefix cache hit ratio", "Share of prompt tokens the router expected to "
                   "find in a backend's prefix cache.", "percentunit",
                   [target(f"{rate_sum(Metric.PREFIX_HIT_TOKENS.total, 'model')} / "
                           f"{rate_sum(Metric.PREFIX_LOOKUP_TOKENS.total, 'model')}",
                           "{{model}}")], min_value=0, max_value=1),
        timeseries("Prefix hit estimate by backend", "Router's current estimate of the prefix "
                   "overlap per backend.", "percentunit",
                   [target(f"avg by (backend) ({Metric.PREFIX_CACHE_HIT_ESTIMATE}{{{SEL}}})",
                           "{{backend}}")], min_value=0),
    ]


def cache_panels() -> list[dict]:
    """The response cache (models with a cache policy only)."""
    lookups = Metric.CACHE_REQUESTS.total
    hits = rate_sum(lookups, "model", SEL + ', result=~"hit|semantic_hit"')
    looked_up = rate_sum(lookups, "model", SEL + ', result!="bypass"')
    return [
        timeseries("Response cache hit ratio", "Share of cache lookups answered from the "
                   "cache (exact and semantic hits), per model.", "percentunit",
                   [target(f"{hits} / {looked_up}", "{{model}}")], min_value=0,
                   max_value=1),
        timeseries("Response cache lookups", "Lookups by result: hit, semantic_hit, miss, "
                   "and bypass (not cacheable: sampled, or Cache-Control).", "ops",
                   [target(rate_sum(lookups, "model, result"), "{{model}} {{result}}")],
                   stack=True),
        timeseries("Response cache lookup latency", "Exact lookups (memory or Redis) and "
                   "semantic ones (the embedding call included).", "s",
                   quantiles(Metric.CACHE_LOOKUP_DURATION, SEL_NO_MODEL, "kind",
                             qs=(0.5, 0.99))),
        timeseries("Response cache entries", "Answers held (per process; with Redis the "
                   "shared exact store).", "short",
                   [target(f"max by (kind) ({Metric.CACHE_ENTRIES}{{{SEL_NO_MODEL}}})",
                           "{{kind}}")], min_value=0),
    ]


def guardrail_panels() -> list[dict]:
    """Guardrails (models or keys with a policy only)."""
    actions = Metric.GUARDRAIL_ACTIONS.total
    return [
        timeseries("Guardrail actions", "Rule matches per model by rule, action (mask, "
                   "block, log, fail_open, fail_closed) and direction (input, output).", "ops",
                   [target(rate_sum(actions, "model, rule, action, direction"),
                           "{{model}} {{rule}} {{action}} {{direction}}")], stack=True),
    ]


def build() -> dict:
    panels = (traffic_panels() + latency_panels() + admission_panels() + backend_panels()
              + cache_panels() + guardrail_panels())
    return dashboard("inferplane-gateway", "Inferplane / Gateway overview",
                     "Traffic, errors, latency, admission and backend state of the gateway.",
                     variables(), panels, tags=("gateway",))

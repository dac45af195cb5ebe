"""Engine fleet: scheduler load, KV cache, prefix cache, preemptions and throughput.

Reads the vLLM metric names, which the built-in engine exports too, so one
dashboard covers vLLM servers and built-in engines side by side.
"""
from __future__ import annotations

from grafana import RATE, dashboard, quantiles, query_variable, stat, table, target, timeseries

from common.metric_names import EngineMetric

SEL = 'job=~"$job", instance=~"$instance", model_name=~"$model"'


def variables() -> list[dict]:
    return [
        query_variable("job", "Job", f"label_values({EngineMetric.NUM_REQUESTS_RUNNING}, job)",
                       default="inferplane-engine", multi=False),
        query_variable("instance", "Instance",
                       f'label_values({EngineMetric.NUM_REQUESTS_RUNNING}{{job=~"$job"}}, instance)'),
        query_variable("model", "Model",
                       f'label_values({EngineMetric.NUM_REQUESTS_RUNNING}{{job=~"$job"}}, model_name)'),
    ]


def rate_sum(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{SEL}}}[{RATE}]))"


def summary_panels() -> list[dict]:
    return [
        stat("Engines up", "Engine targets Prometheus scrapes successfully.", "short",
             [target('sum(up{job=~"$job", instance=~"$instance"})')]),
        stat("Running requests", "Requests in the running batch across the fleet.", "short",
             [target(f"sum({EngineMetric.NUM_REQUESTS_RUNNING}{{{SEL}}})")]),
        stat("Waiting requests", "Requests waiting for KV cache or batch room.", "short",
             [target(f"sum({EngineMetric.NUM_REQUESTS_WAITING}{{{SEL}}})")],
             thresholds=[(0, "green"), (1, "orange"), (20, "red")]),
        stat("Max KV cache usage", "Fullest KV cache among the selected engines.", "percentunit",
             [target(f"max({EngineMetric.KV_CACHE_USAGE_PERC}{{{SEL}}})")],
             thresholds=[(0, "green"), (0.8, "orange"), (0.95, "red")]),
    ]


def scheduler_panels() -> list[dict]:
    return [
        timeseries("Running and waiting requests", "Scheduler queues per engine instance.",
                   "short",
                   [target(f"sum by (instance) ({EngineMetric.NUM_REQUESTS_RUNNING}{{{SEL}}})",
                           "running {{instance}}"),
                    target(f"sum by (instance) ({EngineMetric.NUM_REQUESTS_WAITING}{{{SEL}}})",
                           "waiting {{instance}}")]),
        timeseries("KV cache usage", "Fraction of KV cache blocks in use per engine.",
                   "percentunit",
                   [target(f"max by (instance) ({EngineMetric.KV_CACHE_USAGE_PERC}{{{SEL}}})",
                           "{{instance}}")],
                   min_value=0, max_value=1, thresholds=[(0, "green"), (0.95, "red")]),
        timeseries("Prefix cache hit rate", "Share of queried prompt tokens found in the "
                   "engine's prefix cache.", "percentunit",
                   [target(f"{rate_sum(EngineMetric.PREFIX_CACHE_HITS.total, 'instance')} / "
                           f"{rate_sum(EngineMetric.PREFIX_CACHE_QUERIES.total, 'instance')}",
                           "{{instance}}")], min_value=0, max_value=1),
        timeseries("Preemptions", "Requests evicted from the batch to free KV cache.", "ops",
                   [target(rate_sum(EngineMetric.NUM_PREEMPTIONS.total, "instance"), "{{instance}}")]),
        timeseries("Token throughput", "Prompt (prefill) and generated (decode) tokens per "
                   "second.", "suffix: tok/s",
                   [target(f"sum(rate({EngineMetric.PROMPT_TOKENS.total}{{{SEL}}}[{RATE}]))", "prompt"),
                    target(f"sum(rate({EngineMetric.GENERATION_TOKENS.total}{{{SEL}}}[{RATE}]))",
                           "generation")], stack=True),
        timeseries("Finished requests by reason", "Completed requests split by finish reason "
                   "(stop, length, abort).", "reqps",
                   [target(rate_sum(EngineMetric.REQUEST_SUCCESS.total, "finished_reason"),
                           "{{finished_reason}}")], stack=True),
    ]


def latency_panels() -> list[dict]:
    return [
        timeseries("Engine TTFT", "Time to first token measured inside the engine.", "s",
                   quantiles(EngineMetric.TIME_TO_FIRST_TOKEN, SEL)),
        timeseries("Engine inter-token latency", "Gap between consecutive output tokens.", "s",
                   quantiles(EngineMetric.INTER_TOKEN_LATENCY, SEL)),
        timeseries("Engine end-to-end latency", "Request latency from arrival to finish inside "
                   "the engine.", "s", quantiles("vllm:e2e_request_latency_seconds", SEL)),
        timeseries("Engine queue time", "Time requests spend waiting before their first "
                   "schedule.", "s", quantiles(EngineMetric.REQUEST_QUEUE_TIME, SEL)),
        timeseries("Prompt and generation length", "Median tokens per request.", "short",
                   quantiles(EngineMetric.REQUEST_PROMPT_TOKENS, SEL, qs=(0.5,), name="prompt")
                   + quantiles(EngineMetric.REQUEST_GENERATION_TOKENS, SEL, qs=(0.5,),
                               name="generation")),
        timeseries("Tokens per engine step", "Median tokens scheduled in one engine iteration "
                   "(batch fill).", "short",
                   quantiles(EngineMetric.ITERATION_TOKENS, SEL, qs=(0.5, 0.95))),
        table("Cache configuration", "KV cache settings reported by each engine "
              "(block size, number of blocks, prefix caching).", "none",
              [target(f"max by (instance, block_size, num_gpu_blocks, enable_prefix_caching) "
                      f"({EngineMetric.CACHE_CONFIG_INFO}{{job=~\"$job\", instance=~\"$instance\"}})",
                      instant=True, table=True)]),
    ]


def build() -> dict:
    panels = summary_panels() + scheduler_panels() + latency_panels()
    return dashboard("inferplane-engine-fleet", "Inferplane / Engine fleet",
                     "Load, KV cache, prefix cache and throughput of the inference engines.",
                     variables(), panels, tags=("engine",))

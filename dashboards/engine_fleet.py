"""Engine fleet: scheduler load, KV cache, prefix cache, preemptions and throughput.

Reads the vLLM metric names, which the built-in engine exports too, so one
dashboard covers vLLM servers and built-in engines side by side.
"""
from __future__ import annotations

from grafana import (RATE, dashboard, query_variable, quantiles, stat, table, target,
                     timeseries)

SEL = 'job=~"$job", instance=~"$instance", model_name=~"$model"'


def variables() -> list[dict]:
    return [
        query_variable("job", "Job", "label_values(vllm:num_requests_running, job)",
                       default="inferplane-engine", multi=False),
        query_variable("instance", "Instance",
                       'label_values(vllm:num_requests_running{job=~"$job"}, instance)'),
        query_variable("model", "Model",
                       'label_values(vllm:num_requests_running{job=~"$job"}, model_name)'),
    ]


def rate_sum(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{SEL}}}[{RATE}]))"


def summary_panels() -> list[dict]:
    return [
        stat("Engines up", "Engine targets Prometheus scrapes successfully.", "short",
             [target('sum(up{job=~"$job", instance=~"$instance"})')]),
        stat("Running requests", "Requests in the running batch across the fleet.", "short",
             [target(f"sum(vllm:num_requests_running{{{SEL}}})")]),
        stat("Waiting requests", "Requests waiting for KV cache or batch room.", "short",
             [target(f"sum(vllm:num_requests_waiting{{{SEL}}})")],
             thresholds=[(0, "green"), (1, "orange"), (20, "red")]),
        stat("Max KV cache usage", "Fullest KV cache among the selected engines.", "percentunit",
             [target(f"max(vllm:kv_cache_usage_perc{{{SEL}}})")],
             thresholds=[(0, "green"), (0.8, "orange"), (0.95, "red")]),
    ]


def scheduler_panels() -> list[dict]:
    return [
        timeseries("Running and waiting requests", "Scheduler queues per engine instance.",
                   "short",
                   [target(f"sum by (instance) (vllm:num_requests_running{{{SEL}}})",
                           "running {{instance}}"),
                    target(f"sum by (instance) (vllm:num_requests_waiting{{{SEL}}})",
                           "waiting {{instance}}")]),
        timeseries("KV cache usage", "Fraction of KV cache blocks in use per engine.",
                   "percentunit",
                   [target(f"max by (instance) (vllm:kv_cache_usage_perc{{{SEL}}})",
                           "{{instance}}")],
                   min_value=0, max_value=1, thresholds=[(0, "green"), (0.95, "red")]),
        timeseries("Prefix cache hit rate", "Share of queried prompt tokens found in the "
                   "engine's prefix cache.", "percentunit",
                   [target(f"{rate_sum('vllm:prefix_cache_hits_total', 'instance')} / "
                           f"{rate_sum('vllm:prefix_cache_queries_total', 'instance')}",
                           "{{instance}}")], min_value=0, max_value=1),
        timeseries("Preemptions", "Requests evicted from the batch to free KV cache.", "ops",
                   [target(rate_sum("vllm:num_preemptions_total", "instance"), "{{instance}}")]),
        timeseries("Token throughput", "Prompt (prefill) and generated (decode) tokens per "
                   "second.", "suffix: tok/s",
                   [target(f"sum(rate(vllm:prompt_tokens_total{{{SEL}}}[{RATE}]))", "prompt"),
                    target(f"sum(rate(vllm:generation_tokens_total{{{SEL}}}[{RATE}]))",
                           "generation")], stack=True),
        timeseries("Finished requests by reason", "Completed requests split by finish reason "
                   "(stop, length, abort).", "reqps",
                   [target(rate_sum("vllm:request_success_total", "finished_reason"),
                           "{{finished_reason}}")], stack=True),
    ]


def latency_panels() -> list[dict]:
    return [
        timeseries("Engine TTFT", "Time to first token measured inside the engine.", "s",
                   quantiles("vllm:time_to_first_token_seconds", SEL)),
        timeseries("Engine inter-token latency", "Gap between consecutive output tokens.", "s",
                   quantiles("vllm:inter_token_latency_seconds", SEL)),
        timeseries("Engine end-to-end latency", "Request latency from arrival to finish inside "
                   "the engine.", "s", quantiles("vllm:e2e_request_latency_seconds", SEL)),
        timeseries("Engine queue time", "Time requests spend waiting before their first "
                   "schedule.", "s", quantiles("vllm:request_queue_time_seconds", SEL)),
        timeseries("Prompt and generation length", "Median tokens per request.", "short",
                   quantiles("vllm:request_prompt_tokens", SEL, qs=(0.5,), name="prompt")
                   + quantiles("vllm:request_generation_tokens", SEL, qs=(0.5,),
                               name="generation")),
        timeseries("Tokens per engine step", "Median tokens scheduled in one engine iteration "
                   "(batch fill).", "short",
                   quantiles("vllm:iteration_tokens_total", SEL, qs=(0.5, 0.95))),
        table("Cache configuration", "KV cache settings reported by each engine "
              "(block size, number of blocks, prefix caching).", "none",
              [target(f"max by (instance, block_size, num_gpu_blocks, enable_prefix_caching) "
                      f"(vllm:cache_config_info{{job=~\"$job\", instance=~\"$instance\"}})",
                      instant=True, table=True)]),
    ]


def build() -> dict:
    panels = summary_panels() + scheduler_panels() + latency_panels()
    return dashboard("inferplane-engine-fleet", "Inferplane / Engine fleet",
                     "Load, KV cache, prefix cache and throughput of the inference engines.",
                     variables(), panels, tags=("engine",))

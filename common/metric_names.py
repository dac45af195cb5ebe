"""Every metric family the product exports or reads, named once.

The gateway and the control plane declare their families with these names, the rollout
analysis reads scrapes by them, and the dashboard and alert generators write them into
PromQL, so a rename here reaches every place at once::

    Counter(Metric.REQUESTS, "Requests by final status code", [...])     # declares ..._total
    f"sum(rate({Metric.REQUESTS.total}{{job=~'$job'}}[5m]))"               # PromQL
    families[Metric.REQUESTS]                                             # a parsed scrape

A member's value is the family's name as prometheus_client's parser reports it; a counter's
samples carry `_total` (`.total`), a histogram's `_bucket`, `_count` and `_sum`.
`EngineMetric` are the vLLM-compatible families every engine serves (the builtin one too),
which the gateway polls for load and the engine dashboards and alerts read.
"""
from __future__ import annotations

from enum import StrEnum


class _Family(StrEnum):
    @property
    def total(self) -> str:
        """A counter's sample name."""
        return f"{self.value}_total"


class Metric(_Family):
    # gateway: every request
    REQUESTS = "inferplane_requests"                                  # counter
    REQUEST_DURATION = "inferplane_request_duration_seconds"          # histogram
    TIME_TO_FIRST_TOKEN = "inferplane_time_to_first_token_seconds"    # histogram
    TIME_PER_OUTPUT_TOKEN = "inferplane_time_per_output_token_seconds"  # histogram
    INTER_TOKEN_LATENCY = "inferplane_inter_token_latency_seconds"    # histogram
    TOKENS = "inferplane_tokens"                                      # counter
    SPEND_USD = "inferplane_spend_usd"                                # counter
    INFLIGHT_REQUESTS = "inferplane_inflight_requests"                # gauge
    # gateway: admission, routing, failures
    QUEUE_DEPTH = "inferplane_queue_depth"                            # gauge
    QUEUE_WAIT = "inferplane_queue_wait_seconds"                      # histogram
    REJECTIONS = "inferplane_rejections"                              # counter
    CIRCUIT_BREAKER_STATE = "inferplane_circuit_breaker_state"        # gauge (BreakerState codes)
    ROUTING_DECISIONS = "inferplane_routing_decisions"                # counter
    PREFIX_CACHE_HIT_ESTIMATE = "inferplane_prefix_cache_hit_estimate"  # gauge
    PREFIX_LOOKUP_TOKENS = "inferplane_prefix_lookup_tokens"          # counter
    PREFIX_HIT_TOKENS = "inferplane_prefix_hit_tokens"                # counter
    UPSTREAM_ERRORS = "inferplane_upstream_errors"                    # counter (UpstreamErrorKind)
    STREAM_RESUMES = "inferplane_stream_resumes"                      # counter
    RETRIES = "inferplane_retries"                                    # counter
    FALLBACKS = "inferplane_fallbacks"                                # counter
    # gateway: guardrails (model, rule, action, direction)
    GUARDRAIL_ACTIONS = "inferplane_guardrail_actions"                # counter
    # gateway: shadow copies (apart from what clients received)
    SHADOW_REQUESTS = "inferplane_shadow_requests"                    # counter
    SHADOW_SIMILARITY = "inferplane_shadow_similarity"                # histogram
    SHADOW_REQUEST_DURATION = "inferplane_shadow_request_duration_seconds"  # histogram
    SHADOW_TIME_TO_FIRST_TOKEN = "inferplane_shadow_time_to_first_token_seconds"  # histogram
    SHADOW_LENGTH_RATIO = "inferplane_shadow_length_ratio"            # histogram
    # gateway: response cache (gateway/cache)
    CACHE_REQUESTS = "inferplane_cache_requests"                      # counter (result)
    CACHE_ENTRIES = "inferplane_cache_entries"                        # gauge (exact | semantic)
    CACHE_LOOKUP_DURATION = "inferplane_cache_lookup_seconds"         # histogram
    # every server process
    EVENT_LOOP_LAG = "inferplane_event_loop_lag_seconds"              # gauge
    EVENT_LOOP_TASKS = "inferplane_event_loop_tasks"                  # gauge
    # control plane
    BACKEND_HEALTHY = "inferplane_backend_healthy"                    # gauge
    SLO_ERROR_BUDGET_REMAINING = "inferplane_slo_error_budget_remaining"  # gauge
    ROLLOUT_STATE = "inferplane_rollout_state"                        # gauge (RolloutPhase codes)
    ROLLOUT_STEP_STARTED = "inferplane_rollout_step_started_timestamp_seconds"  # gauge
    # builtin embedding server
    EMBEDDING_BATCHES = "inferplane_embedding_batches"                # counter
    EMBEDDING_BATCH_INPUTS = "inferplane_embedding_batch_inputs"      # counter


class EngineMetric(_Family):
    NUM_REQUESTS_RUNNING = "vllm:num_requests_running"                # gauge
    NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"                # gauge
    NUM_REQUESTS_SWAPPED = "vllm:num_requests_swapped"                # gauge
    KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"                  # gauge
    GPU_CACHE_USAGE_PERC = "vllm:gpu_cache_usage_perc"                # gauge (older vLLM)
    GPU_PREFIX_CACHE_HIT_RATE = "vllm:gpu_prefix_cache_hit_rate"      # gauge (older vLLM)
    CACHE_CONFIG_INFO = "vllm:cache_config_info"                      # gauge (info)
    LORA_REQUESTS_INFO = "vllm:lora_requests_info"                    # gauge (info)
    PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"                # counter
    PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"                      # counter
    PROMPT_TOKENS = "vllm:prompt_tokens"                              # counter
    GENERATION_TOKENS = "vllm:generation_tokens"                      # counter
    REQUEST_SUCCESS = "vllm:request_success"                          # counter
    NUM_PREEMPTIONS = "vllm:num_preemptions"                          # counter
    ITERATION_TOKENS = "vllm:iteration_tokens_total"                  # histogram
    TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"          # histogram
    INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"          # histogram
    REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"            # histogram
    REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"              # histogram
    REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"      # histogram
    SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts"            # counter
    SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"  # counter
    SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"  # counter
    SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"  # counter


# Label values for what a request did not have: no version resolved yet (refused before a
# split chose one; labelled apart so a failing canary's refusals still count against it), no team.
NO_VERSION = "none"
NO_TEAM = "none"

__all__ = ["EngineMetric", "Metric", "NO_TEAM", "NO_VERSION"]

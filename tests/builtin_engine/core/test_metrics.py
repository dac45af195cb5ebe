"""The exposition carries vLLM's metric names and types, and the values follow the traffic."""
from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.core.conftest import sim_engine

EXPECTED_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries_total": "counter",
    "vllm:prefix_cache_hits_total": "counter",
    "vllm:num_preemptions_total": "counter",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:request_success_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:cache_config_info": "gauge",
}


def sample(text: str, name: str, **labels) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


def test_exposition_after_traffic():
    engine = sim_engine(num_blocks=12, served_model_name="tiny", swap_space_gib=0.005)
    shared = list(range(3000, 3064))
    prompts = [shared + [i] * 5 for i in range(4)]
    engine.generate(prompts, SamplingParams(max_tokens=30, ignore_eos=True))
    engine.add_request("gone", [5, 6, 7], SamplingParams(max_tokens=3))
    engine.abort_request("gone")
    engine.step()
    text = engine.metrics.exposition().decode()
    for name, kind in EXPECTED_TYPES.items():
        assert re.search(rf"^# TYPE {re.escape(name)} {kind}$", text, re.M), name
    assert sample(text, "vllm:prompt_tokens_total", model_name="tiny") == 4 * 69
    assert sample(text, "vllm:generation_tokens_total") == 4 * 30
    assert sample(text, "vllm:request_success_total", finished_reason="length") == 4
    assert sample(text, "vllm:request_success_total", finished_reason="abort") == 1
    assert sample(text, "vllm:prefix_cache_queries_total") >= 4 * 69
    assert sample(text, "vllm:prefix_cache_hits_total") >= 64
    assert sample(text, "vllm:num_preemptions_total") == engine.stats()["num_preemptions"] > 0
    assert sample(text, "vllm:time_to_first_token_seconds_count") == 4
    assert sample(text, "vllm:inter_token_latency_seconds_count") >= 4 * 29
    assert sample(text, "vllm:e2e_request_latency_seconds_count") == 5
    assert sample(text, "vllm:request_generation_tokens_sum") == 4 * 30
    computed = sample(text, "vllm:iteration_tokens_total_sum")
    hits = sample(text, "vllm:prefix_cache_hits_total")
    assert computed + hits >= 4 * (69 + 29)  # every prompt token is either computed or hit
    assert sample(text, "vllm:num_requests_running") == 0
    assert sample(text, "vllm:kv_cache_usage_perc") == 0
    assert sample(text, "vllm:cache_config_info", block_size="16", num_gpu_blocks="12",
                  enable_prefix_caching="True") == 1

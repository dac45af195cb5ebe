"""Engine Prometheus text → LoadView for each engine family."""
import pytest

from engine_adapter.metrics_parse import parse_load

VLLM_V1 = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 3
vllm:num_requests_waiting{model_name="a"} 2
vllm:kv_cache_usage_perc{model_name="a"} 0.5
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="a"} 200
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="a"} 50
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="x"} 1
"""


@pytest.mark.parametrize("engine,text,expected", [
    ("vllm", VLLM_V1, (3, 2, 0.5, 0.25, {"sql", "chat", "x"})),
    ("builtin", VLLM_V1, (3, 2, 0.5, 0.25, {"sql", "chat", "x"})),
    ("sglang", "sglang:num_running_reqs 4\nsglang:num_queue_reqs 1\nsglang:token_usage 0.3\n"
               "sglang:cache_hit_rate 0.7\n", (4, 1, 0.3, 0.7, set())),
    ("tgi", "tgi_batch_current_size 5\ntgi_queue_size 6\n", (5, 6, 0.0, 0.0, set())),
    ("llama.cpp", "llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\n"
                  "llamacpp:kv_cache_usage_ratio 0.9\n", (1, 2, 0.9, 0.0, set())),
])
def test_parse_load(engine, text, expected):
    view = parse_load(engine, text)
    assert view.running == expected[0] and view.waiting == expected[1]
    assert view.kv_usage == pytest.approx(expected[2])
    assert view.prefix_hit_rate == pytest.approx(expected[3])
    assert set(view.adapters) == expected[4]

"""Normalise engines' Prometheus text into a LoadView.

Each engine names the same quantities differently; the tables below map them. The builtin
engine exports vLLM names. Values are summed over label sets (one server may label per model).
"""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from common.metric_names import EngineMetric
from engine_adapter.base import LoadView

# quantity -> candidate sample names, first present wins
_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "running": (EngineMetric.NUM_REQUESTS_RUNNING,),
        "waiting": (EngineMetric.NUM_REQUESTS_WAITING,),
        "kv_usage": (EngineMetric.KV_CACHE_USAGE_PERC, EngineMetric.GPU_CACHE_USAGE_PERC),
        "prefix_hit_rate": (EngineMetric.GPU_PREFIX_CACHE_HIT_RATE,),
    },
    "sglang": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "prefix_hit_rate": ("sglang:cache_hit_rate",),
    },
    "tgi": {
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
    },
    "llamacpp": {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
    },
}
_NAMES["builtin"] = _NAMES["vllm"]
_ENGINE_ALIASES = {"llama.cpp": "llamacpp", "llama_cpp": "llamacpp"}

# vLLM V1 exports prefix-cache counters instead of a ratio.
_VLLM_PREFIX_QUERIES = EngineMetric.PREFIX_CACHE_QUERIES.total
_VLLM_PREFIX_HITS = EngineMetric.PREFIX_CACHE_HITS.total
_VLLM_LORA_INFO = EngineMetric.LORA_REQUESTS_INFO


def _sample_sums(text: str) -> tuple[dict[str, float], frozenset[str]]:
    sums: dict[str, float] = {}
    adapters: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            if sample.name == _VLLM_LORA_INFO:
                adapters.update(_split_adapters(sample.labels.get("running_lora_adapters", "")))
                adapters.update(_split_adapters(sample.labels.get("waiting_lora_adapters", "")))
    return sums, frozenset(adapters)


def _split_adapters(value: str) -> list[str]:
    return [name for name in (part.strip() for part in value.split(",")) if name]


def _first(sums: dict[str, float], names: tuple[str, ...]) -> float:
    for name in names:
        if name in sums:
            return sums[name]
    return 0.0


def parse_load(engine: str, text: str) -> LoadView:
    """LoadView from one scrape of `engine`'s /metrics (unknown engines try vLLM names)."""
    engine = _ENGINE_ALIASES.get(engine, engine)
    names = _NAMES.get(engine, _NAMES["vllm"])
    sums, adapters = _sample_sums(text)
    hit_rate = _first(sums, names.get("prefix_hit_rate", ()))
    queries = sums.get(_VLLM_PREFIX_QUERIES, 0.0)
    if not hit_rate and queries > 0:
        hit_rate = sums.get(_VLLM_PREFIX_HITS, 0.0) / queries
    kv = _first(sums, names.get("kv_usage", ()))
    return LoadView(
        running=_first(sums, names["running"]),
        waiting=_first(sums, names["waiting"]),
        kv_usage=min(max(kv, 0.0), 1.0),
        prefix_hit_rate=min(max(hit_rate, 0.0), 1.0),
        adapters=adapters,
    )

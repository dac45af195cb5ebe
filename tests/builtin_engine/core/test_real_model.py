"""Scheduling must never change what the real model generates (greedy decoding).

Each variant (prefix caching, chunk budgets, forced preemption, batch mix) is compared with a
plain run: no prefix cache, one big budget, plenty of blocks.
"""
from __future__ import annotations

import os

import pytest

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based ink and a wooden screw press. Within "
        "fifty years, presses were running in more than two hundred European cities, books "
        "became cheaper, literacy spread, and scholars could share identical copies of their "
        "work across borders. Historians still debate how quickly")
DEVICE = os.environ.get("INFERPLANE_TEST_DEVICE", "cpu")  # e.g. cuda on a GPU machine
PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def loaded():
    from builtin_engine.loader import load_model
    return load_model(EngineConfig(device=DEVICE, dtype="float32"))


@pytest.fixture(scope="module")
def prompts(loaded):
    ids = loaded.tokenizer.encode(TEXT)
    assert len(ids) >= 64
    # The first three share a prefix; lengths sit near block ends so decoding needs blocks.
    return [ids[:30], ids[:46], ids[:62], ids[5:40]]


def run(loaded, prompts, **overrides) -> tuple[dict[str, list[int]], LLMEngine]:
    from builtin_engine.runner.model_runner import ModelRunner
    values = dict(device=DEVICE, dtype="float32", num_blocks=64, max_num_batched_tokens=4096,
                  swap_space_gib=0.0)
    values.update(overrides)
    config = EngineConfig(**values)
    engine = LLMEngine(config, ModelRunner(config, loaded), loaded.tokenizer)
    results = engine.generate(prompts, PARAMS)
    assert all(o.finish_reason == "length" for o in results.values()), results
    kv = engine.scheduler.kv
    kv.check_integrity()
    assert kv.num_free_blocks == kv.num_blocks
    return {rid: o.new_token_ids for rid, o in results.items()}, engine


@pytest.fixture(scope="module")
def reference(loaded, prompts):
    tokens, _ = run(loaded, prompts, enable_prefix_caching=False)
    assert len({tuple(t) for t in tokens.values()}) > 1  # the prompts lead somewhere different
    return tokens


def test_prefix_caching_on_matches_off(loaded, prompts, reference):
    # A budget of 32 makes the first prompt finish its prefill before the others start, so
    # they find its blocks in the cache.
    tokens, engine = run(loaded, prompts, enable_prefix_caching=True, max_num_batched_tokens=32)
    assert engine.stats()["prefix_cache_hits"] >= 32
    assert tokens == reference


@pytest.mark.parametrize("budget", [16, 64])
def test_chunked_prefill_matches(loaded, prompts, reference, budget):
    tokens, _ = run(loaded, prompts, max_num_batched_tokens=budget)
    assert tokens == reference


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_forced_preemption_matches(loaded, prompts, reference, mode):
    tokens, engine = run(loaded, prompts, num_blocks=8, preemption_mode=mode,
                         swap_space_gib=0.01, watermark=0.0, max_num_batched_tokens=64)
    assert engine.stats()["num_preemptions"] > 0
    assert tokens == reference


def test_request_alone_matches_mixed_batch(loaded, prompts, reference):
    tokens, _ = run(loaded, [prompts[2]])
    assert tokens["0"] == reference["2"]


def test_penalties_reach_the_sampler_through_the_scheduler():
    """A strong repetition penalty changes greedy text; the same request without it does not
    change between runs (the history the scheduler hands over is what moves it)."""
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner

    config = EngineConfig(dtype="float32", num_blocks=64, swap_space_gib=0.0)
    loaded = load_model(config)
    engine = LLMEngine(config, ModelRunner(config, loaded), loaded.tokenizer)
    prompt = loaded.tokenizer.encode("one two one two one two one two one two")

    def run(**kw):
        params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, **kw)
        return engine.generate([prompt], params)["0"].new_token_ids

    plain = run()
    assert run() == plain
    penalised = run(repetition_penalty=3.0)
    assert penalised != plain
    seen = set(prompt)
    assert sum(t in seen for t in penalised) < sum(t in seen for t in plain)

"""Scheduling policy on the simulated executor: budgets, priorities, preemption, stops."""
from __future__ import annotations

import pytest

from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.core.simulator import SimulatedExecutor
from tests.builtin_engine.core.conftest import random_prompts, sim_config, sim_engine


class RecordingExecutor(SimulatedExecutor):
    def __init__(self, config):
        super().__init__(config)
        self.steps = []

    def execute(self, out):
        self.steps.append(out)
        return super().execute(out)


def recording_engine(**overrides) -> tuple[LLMEngine, RecordingExecutor]:
    config = sim_config(**overrides)
    executor = RecordingExecutor(config)
    return LLMEngine(config, executor, eos_token_id=2), executor


def tokens_of(results) -> dict[str, list[int]]:
    return {rid: out.new_token_ids for rid, out in results.items()}


def assert_all_freed(engine: LLMEngine) -> None:
    kv = engine.scheduler.kv
    kv.check_integrity()
    assert kv.num_free_blocks == kv.num_blocks and kv.cpu_pool.num_free_blocks == \
        kv.cpu_pool.num_blocks
    assert not engine.scheduler.running and not engine.scheduler.waiting


PROMPTS = random_prompts(12, 5, 150, seed=1)
PARAMS = SamplingParams(max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def reference_tokens():
    engine = sim_engine(enable_prefix_caching=False, max_num_batched_tokens=8192)
    return tokens_of(engine.generate(PROMPTS, PARAMS))


@pytest.mark.parametrize("budget,threshold", [(16, 0), (64, 0), (256, 32), (8192, 0)])
def test_chunked_prefill_respects_budget_and_keeps_outputs(reference_tokens, budget, threshold):
    engine, executor = recording_engine(max_num_batched_tokens=budget,
                                        long_prefill_token_threshold=threshold)
    assert tokens_of(engine.generate(PROMPTS, PARAMS)) == reference_tokens
    for out in executor.steps:
        assert 0 < out.num_batched_tokens <= budget
        if threshold:
            assert all(len(s.token_ids) <= threshold for s in out.scheduled)
    if budget == 16:
        assert any(not s.sample for out in executor.steps for s in out.scheduled)
    assert_all_freed(engine)


def test_prefix_caching_does_not_change_outputs(reference_tokens):
    shared = list(range(2000, 2064))
    prompts = [shared + p for p in PROMPTS]
    off = sim_engine(enable_prefix_caching=False).generate(prompts, PARAMS)
    engine = sim_engine(max_num_batched_tokens=64)
    on = engine.generate(prompts, PARAMS)
    assert tokens_of(on) == tokens_of(off)
    assert sum(o.num_cached_tokens for o in on.values()) >= 64 * (len(prompts) - 2)
    assert engine.stats()["prefix_cache_hits"] >= 64 * (len(prompts) - 2)


def test_request_alone_matches_request_in_mixed_batch(reference_tokens):
    alone = sim_engine().generate([PROMPTS[3]], PARAMS)["0"].new_token_ids
    assert alone == reference_tokens["3"]


def test_waiting_queue_orders_by_priority_then_arrival():
    engine, executor = recording_engine(max_num_seqs=1)
    for rid, prio in [("low", 5), ("high", 0), ("mid", 3), ("high2", 0)]:
        engine.add_request(rid, [300, 301, 302], SamplingParams(max_tokens=2), priority=prio)
    order = []
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                order.append(out.request_id)
    assert order == ["high", "high2", "mid", "low"]


@pytest.mark.parametrize("mode", ["recompute", "swap", "auto"])
def test_preemption_picks_lowest_priority_and_all_requests_complete(mode):
    # 3 requests of 30 prompt tokens fill 6 blocks; the first decode past 32 tokens needs a
    # seventh, so one request must go: the lowest priority one (largest value), "b".
    prompts = random_prompts(3, 30, 30, seed=7)
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    expected = tokens_of(sim_engine().generate(prompts, params))
    engine, executor = recording_engine(num_blocks=6, preemption_mode=mode,
                                        swap_space_gib=0.01, watermark=0.0)
    for rid, prio in zip("abc", (0, 2, 1)):
        engine.add_request(rid, prompts["abc".index(rid)], params, priority=prio)
    results = {rid: [] for rid in "abc"}
    preempted = None
    while engine.has_unfinished():
        for out in engine.step():
            results[out.request_id].extend(out.new_token_ids)
        if preempted is None and engine.scheduler.num_preemptions:
            preempted = [r.request_id for r in engine.scheduler.requests.values()
                         if r.num_preemptions]
    assert preempted == ["b"]
    assert results == {rid: expected[str(i)] for i, rid in enumerate("abc")}
    swapped = any(out.blocks_to_swap_out for out in executor.steps)
    assert swapped == (mode != "recompute")
    if swapped:
        assert any(out.blocks_to_swap_in for out in executor.steps)
    assert_all_freed(engine)


def test_many_requests_under_memory_pressure_complete_identically(reference_tokens):
    engine = sim_engine(num_blocks=24, preemption_mode="auto", swap_space_gib=0.005,
                        extra={"preemption_swap_max_tokens": 64})
    assert tokens_of(engine.generate(PROMPTS, PARAMS)) == reference_tokens
    assert engine.stats()["num_preemptions"] > 0
    assert_all_freed(engine)


def test_abort_frees_every_block():
    engine = sim_engine(num_blocks=20, max_num_seqs=4, swap_space_gib=0.005,
                        preemption_mode="swap")
    for i, prompt in enumerate(random_prompts(8, 20, 60, seed=3)):
        engine.add_request(str(i), prompt, SamplingParams(max_tokens=50, ignore_eos=True))
    for _ in range(12):
        engine.step()
    assert engine.scheduler.running and engine.scheduler.waiting
    outputs = engine.abort_all()
    assert {o.request_id for o in outputs} == {str(i) for i in range(8)}
    assert all(o.finished and o.finish_reason == "abort" for o in outputs)
    assert not engine.has_unfinished()
    assert_all_freed(engine)
    assert engine.executor.num_released == 8


@pytest.mark.parametrize("prompt_len,max_tokens,message", [
    (60, 10, "max_model_len 64"), (10, 200, "max_model_len"), (0, 5, "empty"),
    (5, 0, "max_tokens")])
def test_infeasible_request_errors_at_once(prompt_len, max_tokens, message):
    engine = sim_engine(num_blocks=4, max_model_len=128)  # the 64-token KV cache caps it
    engine.add_request("bad", list(range(100, 100 + prompt_len)),
                       SamplingParams(max_tokens=max_tokens))
    engine.add_request("ok", [100, 101], SamplingParams(max_tokens=3))
    first = engine.step()
    bad = [o for o in first if o.request_id == "bad"]
    assert bad and bad[0].finished and bad[0].finish_reason == "error"
    assert message in bad[0].error
    while engine.has_unfinished():
        engine.step()
    assert_all_freed(engine)


def test_stop_conditions():
    prompt = [500, 501, 502]
    free_run = sim_engine().generate([prompt], SamplingParams(max_tokens=10, ignore_eos=True))
    toks = free_run["0"].new_token_ids
    assert free_run["0"].finish_reason == "length" and len(toks) == 10

    def run(engine=None, **params):
        engine = engine or sim_engine()
        return engine.generate([prompt], SamplingParams(**params))["0"]

    out = run(max_tokens=10, stop_token_ids=[toks[3]])
    assert out.finish_reason == "stop" and out.new_token_ids == toks[:4]
    out = run(max_tokens=10, stop_token_ids=[toks[3]], min_tokens=6)
    assert out.new_token_ids == toks[:10] and out.finish_reason == "length"
    eos_engine = LLMEngine(sim_config(), SimulatedExecutor(sim_config()), eos_token_id=toks[2])
    assert run(eos_engine, max_tokens=10).new_token_ids == toks[:3]
    eos_engine = LLMEngine(sim_config(), SimulatedExecutor(sim_config()), eos_token_id=toks[2])
    assert run(eos_engine, max_tokens=10, ignore_eos=True).new_token_ids == toks
    # max_model_len caps prompt + output.
    short = sim_engine(max_model_len=8)
    out = run(short, max_tokens=5, ignore_eos=True)
    assert out.new_token_ids == toks[:5] and out.finish_reason == "length"


class FailingExecutor(SimulatedExecutor):
    def __init__(self, config, fail_at_step):
        super().__init__(config)
        self.fail_at_step = fail_at_step

    def execute(self, out):
        if self.num_steps == self.fail_at_step:
            self.num_steps += 1
            raise RuntimeError("device lost")
        return super().execute(out)


def test_executor_error_fails_scheduled_requests_and_engine_keeps_going():
    config = sim_config()
    engine = LLMEngine(config, FailingExecutor(config, fail_at_step=2), eos_token_id=2)
    results = engine.generate(PROMPTS[:3], PARAMS)
    assert all(o.finish_reason == "error" and "device lost" in o.error
               for o in results.values())
    assert_all_freed(engine)
    again = engine.generate(PROMPTS[:2], PARAMS)
    assert all(o.finish_reason == "length" for o in again.values())


def test_out_of_vocabulary_prompt_fails_alone_with_the_real_tokenizer():
    from builtin_engine.loader.tokenizer import load_tokenizer
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    config = sim_config()
    engine = LLMEngine(config, SimulatedExecutor(config), tokenizer)
    results = engine.generate([[5, tokenizer.vocab_size], [-1, 5], [300, 301]],
                              SamplingParams(max_tokens=3))
    assert [results[k].finish_reason for k in "012"] == ["error", "error", "length"]
    assert "token ids" in results["0"].error
    assert engine.scheduler.stop_token_ids >= {tokenizer.eos_token_id}

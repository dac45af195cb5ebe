"""Speculative steps through the scheduler and KV cache, on the simulated executor.

The simulator fingerprints the context into its KV slots and verifies drafts the way the
model runner does, so a speculative run must emit exactly the tokens of a plain run. A tiny
output vocabulary makes tokens repeat, so n-gram drafts are often right and often wrong.
"""
from __future__ import annotations

import pytest

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.core.conftest import random_prompts, sim_engine

SMALL_VOCAB = dict(sim_vocab_size=104)  # four output ids: drafts match about a quarter


def run(engine, prompts, params, check=None):
    results = {}
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
        results[str(i)] = []
    while engine.has_unfinished():
        for o in engine.step():
            assert o.error is None, o.error
            results[o.request_id].extend(o.new_token_ids)
        if check is not None:
            check(engine)
    kv = engine.scheduler.kv
    kv.check_integrity()
    assert kv.num_free_blocks == kv.num_blocks
    return results


def no_blocks_beyond_need(engine):
    """After every step a request holds only the blocks its known tokens need."""
    kv = engine.scheduler.kv
    for req in engine.scheduler.running:
        assert len(kv.block_ids(req.request_id)) <= kv.blocks_needed(req.num_tokens)


@pytest.mark.parametrize("ngram, k", [(1, 1), (1, 4), (2, 3), (3, 6)])
def test_speculative_output_equals_plain_output(ngram, k):
    prompts = random_prompts(6, 5, 40, seed=ngram * 10 + k)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    plain = run(sim_engine(**SMALL_VOCAB), prompts, params)
    engine = sim_engine(**SMALL_VOCAB, speculative_ngram=ngram, num_speculative_tokens=k)
    spec = run(engine, prompts, params, check=no_blocks_beyond_need)
    assert spec == plain
    assert all(len(v) == 40 for v in spec.values())
    m = engine.metrics.spec
    drafts, drafted, accepted = (m.drafts._value.get(), m.draft_tokens._value.get(),
                                 m.accepted._value.get())
    per_pos = [c._value.get() for c in m.per_pos]
    assert drafts > 0 and 0 < accepted < drafted <= drafts * k
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)  # position i needs i-1 accepted first


def test_speculation_saves_steps_when_drafts_are_right():
    # With two output ids the text is highly repetitive: most drafts are right.
    prompts = random_prompts(1, 8, 8, seed=3)
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    plain_engine, spec_engine = (sim_engine(sim_vocab_size=102),
                                 sim_engine(sim_vocab_size=102, speculative_ngram=3,
                                            num_speculative_tokens=4))
    assert run(spec_engine, prompts, params) == run(plain_engine, prompts, params)
    assert spec_engine.num_steps < plain_engine.num_steps


def test_drafts_respect_max_tokens_and_stop_tokens():
    prompts = random_prompts(4, 10, 30, seed=7)
    for params in (SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True),
                   SamplingParams(max_tokens=50, temperature=0.0, stop_token_ids=[101])):
        plain = run(sim_engine(**SMALL_VOCAB), prompts, params)
        spec = run(sim_engine(**SMALL_VOCAB, speculative_ngram=1, num_speculative_tokens=5),
                   prompts, params)
        assert spec == plain
        assert all(len(v) <= params.max_tokens for v in spec.values())


def test_speculation_under_preemption_keeps_outputs():
    prompts = random_prompts(8, 20, 40, seed=11)
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    plain = run(sim_engine(**SMALL_VOCAB), prompts, params)
    engine = sim_engine(**SMALL_VOCAB, num_blocks=24, speculative_ngram=1,
                        num_speculative_tokens=4, preemption_mode="recompute")
    assert run(engine, prompts, params, check=no_blocks_beyond_need) == plain
    assert engine.scheduler.num_preemptions > 0


def test_sampled_requests_do_not_speculate():
    prompts = random_prompts(3, 10, 20, seed=5)
    params = SamplingParams(max_tokens=20, temperature=0.8, seed=1, ignore_eos=True)
    engine = sim_engine(**SMALL_VOCAB, speculative_ngram=1, num_speculative_tokens=4)
    assert run(engine, prompts, params) == run(sim_engine(**SMALL_VOCAB), prompts, params)
    assert engine.metrics.spec.drafts._value.get() == 0


def test_metrics_are_registered_only_with_speculation():
    assert b"vllm:spec_decode_num_drafts" not in sim_engine().metrics.exposition()
    text = sim_engine(speculative_ngram=2, num_speculative_tokens=3).metrics.exposition()
    for name in (b"vllm:spec_decode_num_drafts_total", b"vllm:spec_decode_num_draft_tokens_total",
                 b"vllm:spec_decode_num_accepted_tokens_total",
                 b'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name='):
        assert name in text
    assert b'position="2"' in text and b'position="3"' not in text

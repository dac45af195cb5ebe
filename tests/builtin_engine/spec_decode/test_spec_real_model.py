"""n-gram speculative decoding on the real model: greedy text is token-identical to plain
decoding, in fewer steps, with KV for rejected drafts freed and vLLM's counters filled."""
from __future__ import annotations

import pytest

from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.runner.model_runner import ModelRunner
from tests.builtin_engine.spec_decode.conftest import real_config

pytestmark = pytest.mark.slow

# Summarisation-style: the answer copies long runs of the prompt.
ARTICLE = ("The city council met on Tuesday to discuss the new library. The library will have "
           "three floors, a reading garden and a room for children. Construction starts in "
           "May and ends next spring. The council thanked the architects for their work.")
PROMPTS = [f"Article: {ARTICLE}\nRepeat the article word for word.\nArticle: The city council",
           f"{ARTICLE} In short: the library will have",
           "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):"]


def generate(loaded, prompts, params_list, **overrides):
    config = real_config(**overrides)
    engine = LLMEngine(config, ModelRunner(config, loaded), loaded.tokenizer)
    for i, (p, params) in enumerate(zip(prompts, params_list)):
        engine.add_request(str(i), loaded.tokenizer.encode(p), params)
    out = {str(i): [] for i in range(len(prompts))}
    reasons = {}
    while engine.has_unfinished():
        for o in engine.step():
            assert o.error is None, o.error
            out[o.request_id].extend(o.new_token_ids)
            if o.finished:
                reasons[o.request_id] = o.finish_reason
        kv = engine.scheduler.kv
        for req in engine.scheduler.running:  # rejected drafts' blocks went back
            assert len(kv.block_ids(req.request_id)) <= kv.blocks_needed(req.num_tokens)
    kv = engine.scheduler.kv
    kv.check_integrity()
    assert kv.num_free_blocks == kv.num_blocks
    return out, reasons, engine


def test_greedy_text_identical_with_fewer_steps(loaded_fp32):
    greedy = SamplingParams(max_tokens=28, temperature=0.0, ignore_eos=True)
    stops = SamplingParams(max_tokens=28, temperature=0.0)  # may end on eos mid-draft
    sampled = SamplingParams(max_tokens=6, temperature=0.9, seed=7, ignore_eos=True)
    params = [greedy, stops, sampled]
    plain, plain_reasons, plain_engine = generate(loaded_fp32, PROMPTS, params)
    spec, spec_reasons, engine = generate(loaded_fp32, PROMPTS, params, speculative_ngram=3,
                                          num_speculative_tokens=5)
    assert spec == plain
    assert spec_reasons == plain_reasons
    assert engine.num_steps < plain_engine.num_steps
    m = engine.metrics.spec
    drafted, accepted = m.draft_tokens._value.get(), m.accepted._value.get()
    assert 0 < accepted <= drafted
    assert sum(c._value.get() for c in m.per_pos) == accepted
    text = engine.metrics.exposition().decode()
    assert "vllm:spec_decode_num_accepted_tokens_total{model_name=" in text
    tok = loaded_fp32.tokenizer
    print("plain steps", plain_engine.num_steps, "spec steps", engine.num_steps,
          "acceptance", accepted / drafted, repr(tok.decode(spec["0"])))

"""Reported logprobs are the model's own next-token distribution (checked against HF
transformers on the same GGUF), whatever sampling does to the logits afterwards."""
from __future__ import annotations

import torch

from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams

PROMPT = "What is the capital of France?"
NEW_TOKENS = 6


def test_logprobs_match_transformers(engine_config, loaded, runner, hf_model):
    tok = loaded.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": PROMPT}]))
    engine = LLMEngine(engine_config, runner, tok)
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, logprobs=3,
                            repetition_penalty=1.3, logit_bias={17: -5.0})
    out = engine.generate([ids], params)["0"]
    assert len(out.logprobs) == len(out.new_token_ids) == NEW_TOKENS
    tokens = list(ids)
    with torch.inference_mode():
        for entry, token in zip(out.logprobs, out.new_token_ids):
            expected = hf_model(input_ids=torch.tensor([tokens])).logits[0, -1].log_softmax(-1)
            assert entry.token_id == token
            assert abs(entry.logprob - expected[token].item()) < 1e-3
            best = expected.topk(3)
            assert [t for t, _ in entry.top] == best.indices.tolist()
            assert all(abs(lp - e) < 1e-3 for (_, lp), e in zip(entry.top, best.values.tolist()))
            tokens.append(token)


def test_no_logprobs_unless_asked(engine_config, loaded, runner):
    engine = LLMEngine(engine_config, runner, loaded.tokenizer)
    out = engine.generate([loaded.tokenizer.encode("Hello")],
                          SamplingParams(max_tokens=2, temperature=0.0))["0"]
    assert out.logprobs is None and runner.step_logprobs == {}

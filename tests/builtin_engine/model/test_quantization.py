"""Weight-only int8 projections: the next-token distributions stay close to float32's.

The bound is on the mean next-token KL(fp32 || int8) over a fixed prompt set, plus top-1
agreement; rounding per output channel moves logits a little, never the whole distribution.
"""
from __future__ import annotations

import pytest
import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.loader import load_model
from builtin_engine.models.quantization import Int8Weight, linear
from builtin_engine.runner.model_runner import ModelRunner
from tests.builtin_engine.model.test_half_precision import PROMPTS, last_logprobs

MAX_MEAN_KL = 0.02


@pytest.fixture(scope="module")
def int8_runner():
    config = EngineConfig(dtype="float32", quantization="int8", num_blocks=16,
                          swap_space_gib=0.0)
    return ModelRunner(config, load_model(config))


def test_int8_linear_matches_dequantised_weight():
    w = torch.randn(64, 32)
    q = Int8Weight.quantize(w)
    assert q.values.dtype == torch.int8 and q.shape == w.shape
    assert (q.dequantize() - w).abs().max() <= q.scale.max() / 2 + 1e-6  # half a step
    x = torch.randn(5, 32)
    torch.testing.assert_close(linear(x, q), x @ q.dequantize().T, rtol=1e-5, atol=1e-5)


def test_int8_next_token_kl_is_bounded(loaded, runner, int8_runner):
    layer = int8_runner.model.layers[0]
    assert isinstance(layer.qkv_proj, Int8Weight) and isinstance(layer.down_proj, Int8Weight)
    kls, same_top = [], 0
    for prompt in PROMPTS:
        ids = loaded.tokenizer.encode(prompt)
        ref, got = last_logprobs(runner, ids), last_logprobs(int8_runner, ids)
        kls.append(float((ref.exp() * (ref - got)).sum()))
        same_top += int(got.argmax() == ref.argmax())
    mean_kl = sum(kls) / len(kls)
    print("int8 KL per prompt", [round(k, 5) for k in kls], "mean", round(mean_kl, 5),
          "same top-1", same_top)
    assert 0 < mean_kl < MAX_MEAN_KL
    assert same_top >= len(PROMPTS) - 1


def test_int8_engine_generates(loaded, int8_runner):
    engine = LLMEngine(int8_runner.config, int8_runner, loaded.tokenizer)
    out = engine.generate([loaded.tokenizer.encode("The capital of France is")],
                          SamplingParams(max_tokens=4, temperature=0.0))
    assert out["0"].finish_reason in ("length", "stop") and out["0"].new_token_ids
    assert "int8 weights" in int8_runner.describe()

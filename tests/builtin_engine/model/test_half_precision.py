"""float16 / bfloat16 weights and KV cache: the next-token distributions stay those of float32.

Greedy text may part ways at near ties in bfloat16, so this compares distributions, not text.
"""
from __future__ import annotations

import pytest
import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.executor import ScheduledRequest
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.loader import load_model
from builtin_engine.runner.model_runner import ModelRunner

PROMPTS = ["The capital of France is", "def add(a, b):", "Once upon a time",
           "The three primary colors are", "Water boils at a temperature of"]
# (mean KL(fp32 || half) bound, prompts whose top token must equal fp32's)
LIMITS = {"float16": (0.0005, len(PROMPTS)), "bfloat16": (0.01, len(PROMPTS) - 1)}


def last_logprobs(runner: ModelRunner, ids: list[int]) -> torch.Tensor:
    blocks = list(range(-(-len(ids) // runner.block_size)))
    req = ScheduledRequest("r", ids, 0, blocks, sample=True, params=SamplingParams(),
                           num_output_tokens=0)
    batch = runner._prepare([req])
    with torch.inference_mode():
        hidden = runner._forward(batch)
        return runner.model.compute_logits(hidden[batch.sample_rows]).log_softmax(-1)[0]


def runner_for(dtype: str) -> ModelRunner:
    config = EngineConfig(dtype=dtype, num_blocks=16, swap_space_gib=0.0)
    return ModelRunner(config, load_model(config))


@pytest.fixture(scope="module")
def fp32_logprobs(loaded, runner):
    return [last_logprobs(runner, loaded.tokenizer.encode(p)) for p in PROMPTS]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_matches_float32(dtype, loaded, fp32_logprobs):
    half = runner_for(dtype)
    expected = getattr(torch, dtype)
    assert half.kv_caches[0][0].dtype == expected
    assert half.model.embed_tokens.dtype == expected
    kls, same_top = [], 0
    for prompt, ref in zip(PROMPTS, fp32_logprobs):
        got = last_logprobs(half, loaded.tokenizer.encode(prompt))
        kls.append(float((ref.exp() * (ref - got)).sum()))
        same_top += int(got.argmax() == ref.argmax())
    max_kl, min_same = LIMITS[dtype]
    print(dtype, "KL per prompt", [round(k, 5) for k in kls], "same top-1", same_top)
    assert sum(kls) / len(kls) < max_kl
    assert same_top >= min_same

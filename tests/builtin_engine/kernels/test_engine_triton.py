"""The real engine on the Triton kernels (interpreter on CPU) generates the same greedy tokens
as on the torch reference kernels."""
from __future__ import annotations

import pytest

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = ["The capital of France is", "def add(a, b):", "Once upon a time"]
PARAMS = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def greedy_tokens(backend: str) -> dict[str, list[int]]:
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner

    config = EngineConfig(attention_backend=backend, kernels=backend, dtype="float32",
                          num_blocks=32, block_size=16, swap_space_gib=0.0)
    loaded = load_model(config)
    engine = LLMEngine(config, ModelRunner(config, loaded), loaded.tokenizer)
    prompts = [loaded.tokenizer.encode(p) for p in PROMPTS]
    return {rid: out.new_token_ids for rid, out in engine.generate(prompts, PARAMS).items()}


def test_triton_backend_matches_torch_backend_greedy():
    reference = greedy_tokens("torch")
    assert all(len(tokens) == PARAMS.max_tokens for tokens in reference.values())
    assert greedy_tokens("triton") == reference

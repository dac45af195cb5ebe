"""The graphed decode path (persistent buffers, padded batches) on CPU: `decode_graphs=static`
runs exactly what a CUDA graph replays, minus the capture, through the Triton interpreter."""
from __future__ import annotations

import pytest
import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.runner.graphed_decode import build_graphed_decode

# Different lengths, so padded rows sit beside sequences of several block counts.
PROMPTS = ["The capital of France is", "def add(a, b):\n    return",
           "Once upon a time, in a small village by the sea, there lived"]
PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def generate(attention: str, decode_graphs: str):
    """Greedy tokens per prompt, and the batch sizes that went through the graphed path."""
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner

    config = EngineConfig(attention_backend=attention, kernels="torch", dtype="float32",
                          num_blocks=48, block_size=4, swap_space_gib=0.0,
                          decode_graphs=decode_graphs, max_num_seqs=6)
    loaded = load_model(config)
    runner = ModelRunner(config, loaded)
    graphed_batches = []
    if runner.graphed is not None:
        assert runner.graphed.graphs.batch_sizes == [1, 2, 4, 6]
        forward = runner.graphed.forward

        def counted(input_ids, positions, meta):
            graphed_batches.append(meta.num_seqs)
            return forward(input_ids, positions, meta)

        runner.graphed.forward = counted
    engine = LLMEngine(config, runner, loaded.tokenizer)
    outputs = engine.generate([loaded.tokenizer.encode(p) for p in PROMPTS], PARAMS)
    return [outputs[rid].new_token_ids for rid in sorted(outputs)], graphed_batches


@pytest.mark.slow
def test_static_graph_buffers_give_the_eager_torch_tokens():
    reference, none = generate("torch", "off")
    assert none == [] and all(len(t) == PARAMS.max_tokens for t in reference)
    tokens, graphed_batches = generate("triton", "static")
    assert tokens == reference
    # every decode step of the three sequences ran padded to a batch of 4
    assert graphed_batches == [3] * (PARAMS.max_tokens - 1)


@pytest.mark.parametrize("mode,attention,device,expected", [
    ("off", "triton", "cpu", False),
    ("auto", "triton", "cpu", False),  # auto captures only on CUDA
    ("static", "torch", "cpu", False),  # the torch reference is not capture-safe
    ("static", "triton", "cpu", True),
])
def test_which_configs_take_the_graphed_path(mode, attention, device, expected):
    config = EngineConfig(decode_graphs=mode, attention_backend=attention, device=device,
                          max_num_seqs=8)
    graphed = build_graphed_decode(config, model=None, kv_caches=[], max_model_len=64,
                                   device=torch.device(device))
    assert (graphed is not None) is expected
    if graphed is not None:
        assert graphed.max_blocks == 4 and graphed.slot_mapping.tolist() == [-1] * 8


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="decode_graphs"):
        build_graphed_decode(EngineConfig(decode_graphs="always"), None, [], 64,
                             torch.device("cpu"))

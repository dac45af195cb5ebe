"""ModelRunner: cache sizing, swap/copy of blocks, seeded sampling, input validation."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.model.driver import generate


def test_block_budget(engine_config, runner):
    cfg = runner.cfg
    assert runner.block_bytes() == 2 * cfg.num_layers * 16 * cfg.num_kv_heads * cfg.head_dim * 4
    assert runner.num_blocks_for(engine_config) == (256, runner.num_cpu_blocks)
    assert runner.num_cpu_blocks == int(0.05 * (1 << 30) // runner.block_bytes())
    by_budget = dataclasses.replace(engine_config, num_blocks=None, kv_cache_memory_gib=0.5)
    assert runner.num_blocks_for(by_budget)[0] == int(0.5 * (1 << 30) // runner.block_bytes())
    with pytest.raises(ValueError):
        runner.num_blocks_for(dataclasses.replace(by_budget, kv_cache_memory_gib=1e-6))


def test_swap_out_in_and_copy_preserve_blocks(runner):
    k0, v0 = runner.kv_caches[0]
    k0[200].normal_()
    v0[200].normal_()
    saved = (k0[200].clone(), v0[200].clone())
    runner.execute(SchedulerOutput(blocks_to_swap_out=[(200, 3)]))
    runner.execute(SchedulerOutput(blocks_to_swap_in=[(3, 201)], blocks_to_copy=[(201, 202)]))
    for block in (201, 202):
        assert torch.equal(runner.kv_caches[0][0][block], saved[0])
        assert torch.equal(runner.kv_caches[0][1][block], saved[1])


def test_seeded_generation_is_reproducible(loaded, runner):
    ids = loaded.tokenizer.encode("Once upon a time")
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)
    first = generate(runner, ids, 12, params, request_id="s1")
    again = generate(runner, ids, 12, params, request_id="s2")
    other = generate(runner, ids, 12, dataclasses.replace(params, seed=99), request_id="s3")
    assert first == again and first != other
    assert not runner.generators  # released


def test_non_sampling_rows_return_nothing_and_bad_input_is_rejected(runner):
    greedy = SamplingParams(temperature=0.0)
    chunk = ScheduledRequest("p", [1, 2, 3], 0, [0], sample=False, params=greedy,
                             num_output_tokens=0)
    assert runner.execute(SchedulerOutput(scheduled=[chunk])) == {}
    for bad in (dataclasses.replace(chunk, token_ids=[10**6]),
                dataclasses.replace(chunk, token_ids=list(range(40)))):  # 40 tokens, 1 block
        with pytest.raises(ValueError):
            runner.execute(SchedulerOutput(scheduled=[bad]))

"""Random configurations and workloads: invariants hold every step, outputs never change."""
from __future__ import annotations

import random

import pytest

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.core.conftest import random_prompts, sim_engine


def _workload(rng: random.Random):
    shared = [rng.randrange(100, 30000) for _ in range(rng.choice([0, 16, 40]))]
    prompts = [shared + p for p in random_prompts(rng.randint(4, 14), 1, 70, rng.random())]
    params = [SamplingParams(max_tokens=rng.randint(1, 30), ignore_eos=True) for _ in prompts]
    return prompts, params


@pytest.mark.parametrize("seed", range(24))
def test_random_workload(seed):
    rng = random.Random(seed)
    prompts, params = _workload(rng)
    reference = sim_engine(enable_prefix_caching=False, num_blocks=1024,
                           max_num_batched_tokens=8192)
    for i, (p, sp) in enumerate(zip(prompts, params)):
        reference.add_request(str(i), p, sp)
    expected = {str(i): [] for i in range(len(prompts))}
    while reference.has_unfinished():
        for out in reference.step():
            expected[out.request_id].extend(out.new_token_ids)

    engine = sim_engine(
        num_blocks=rng.randint(9, 40), max_num_batched_tokens=rng.choice([8, 16, 33, 128]),
        long_prefill_token_threshold=rng.choice([0, 0, 8, 24]), max_num_seqs=rng.randint(1, 8),
        preemption_mode=rng.choice(["recompute", "swap", "auto"]),
        swap_space_gib=rng.choice([0.0, 0.002, 0.02]), watermark=rng.choice([0.0, 0.1]),
        enable_prefix_caching=rng.random() < 0.7, extra={"preemption_swap_max_tokens": 40})
    aborted = set(rng.sample(range(len(prompts)), k=len(prompts) // 4))
    got = {str(i): [] for i in range(len(prompts))}
    reasons = {}
    for i, (p, sp) in enumerate(zip(prompts, params)):
        engine.add_request(str(i), p, sp, priority=rng.randint(0, 3))
    step = 0
    while engine.has_unfinished():
        step += 1
        assert step < 5000, "no progress"
        if step == 3:
            for i in aborted:
                engine.abort_request(str(i))
        for out in engine.step():
            got[out.request_id].extend(out.new_token_ids)
            if out.finished:
                reasons[out.request_id] = out.finish_reason
        engine.scheduler.kv.check_integrity()
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks
    assert kv.cpu_pool.num_free_blocks == kv.cpu_pool.num_blocks
    for rid, reason in reasons.items():
        if reason == "abort":
            assert int(rid) in aborted
            assert got[rid] == expected[rid][:len(got[rid])]
        else:
            assert reason == "length" and got[rid] == expected[rid], rid
    assert len(reasons) == len(prompts)

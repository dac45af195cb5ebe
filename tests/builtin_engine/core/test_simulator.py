"""The simulated executor's cost model and its K/V consistency check."""
from __future__ import annotations

import pytest

from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.core.simulator import SimulatedExecutor
from tests.builtin_engine.core.conftest import sim_config


def _sched(rid, tokens, start, blocks, sample=True, n_out=0):
    return ScheduledRequest(rid, tokens, start, blocks, sample, SamplingParams(), n_out)


def test_cost_model_charges_prefill_tokens_and_decode_batches():
    config = sim_config(sim_prefill_s_per_token=0.001, sim_decode_base_s=0.01,
                        sim_decode_s_per_seq=0.002, sim_decode_s_per_kv_token=0.0001)
    slept = []
    ex = SimulatedExecutor(config, sleep=slept.append)
    ex.num_blocks_for(config)
    out = SchedulerOutput([_sched("p", list(range(100, 120)), 0, [0, 1]),
                           _sched("d", [5], 9, [2], n_out=3)])
    ex.execute(out)
    assert slept == [pytest.approx(20 * 0.001 + 0.01 + 0.002 + 10 * 0.0001)]


def test_tokens_depend_on_cached_context_not_on_block_ids():
    config = sim_config()
    ex = SimulatedExecutor(config)
    ex.num_blocks_for(config)
    prompt = list(range(200, 240))
    a = ex.execute(SchedulerOutput([_sched("a", prompt, 0, [0, 1, 2])]))["a"]
    b = ex.execute(SchedulerOutput([_sched("b", prompt, 0, [5, 6, 7])]))["b"]
    assert a == b and 100 <= a < config.sim_vocab_size
    # Reusing the cached first two blocks of "a" gives the same token...
    c = ex.execute(SchedulerOutput([_sched("c", prompt[32:], 32, [0, 1, 8])]))["c"]
    assert c == a
    # ...while pointing at blocks with other content does not.
    d = ex.execute(SchedulerOutput([_sched("d", prompt[32:], 32, [5, 9, 8])]))["d"]
    assert d != a


def test_block_table_too_short_is_an_error():
    config = sim_config()
    ex = SimulatedExecutor(config)
    ex.num_blocks_for(config)
    with pytest.raises(RuntimeError, match="block table"):
        ex.execute(SchedulerOutput([_sched("a", list(range(100, 120)), 0, [0])]))


def test_budget_sizes_the_block_counts():
    config = sim_config(num_blocks=None, kv_cache_memory_gib=1.0, swap_space_gib=0.5)
    device, cpu = SimulatedExecutor(config).num_blocks_for(config)
    assert device == 2**30 // (46080 * 16) and cpu == device // 2

"""AsyncEngine: streaming, abort, disconnect, shutdown, idle behaviour, kv summary."""
from __future__ import annotations

import asyncio
import resource

import pytest

from builtin_engine.core.block_pool import hash_prompt_blocks
from builtin_engine.core.engine import AsyncEngine, EngineShutDown
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.core.simulator import SimulatedExecutor
from tests.builtin_engine.core.conftest import sim_config, sim_engine


def make_engine(**overrides) -> AsyncEngine:
    config = sim_config(**overrides)
    engine = AsyncEngine(config, SimulatedExecutor(config))
    engine.start()
    return engine


async def collect(engine, rid, prompt, params, priority=0):
    outs = []
    async for out in engine.generate(rid, prompt, params, priority):
        outs.append(out)
    return outs


async def wait_for(predicate, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def all_blocks_free(engine) -> bool:
    s = engine.stats()
    return s["num_free_blocks"] == s["num_blocks"] and s["running"] == s["waiting"] == 0


async def test_streams_tokens_matching_the_sync_engine():
    engine = make_engine()
    prompts = [[300 + i] * (10 + i) for i in range(6)]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    results = await asyncio.gather(*(collect(engine, f"r{i}", p, params)
                                     for i, p in enumerate(prompts)))
    expected = sim_engine().generate(prompts, params)
    for i, outs in enumerate(results):
        assert [len(o.new_token_ids) for o in outs] == [1] * 12  # one chunk per token
        assert [t for o in outs for t in o.new_token_ids] == expected[str(i)].new_token_ids
        assert outs[-1].finished and outs[-1].finish_reason == "length"
        assert not any(o.finished for o in outs[:-1])
        assert outs[-1].num_prompt_tokens == len(prompts[i])
    await engine.shutdown(1.0)
    assert not engine.is_running


async def test_abort_ends_the_stream_and_frees_blocks():
    engine = make_engine(sim_decode_base_s=0.002)
    outs = []
    async for out in engine.generate("long", [400] * 40, SamplingParams(max_tokens=2000,
                                                                         ignore_eos=True)):
        outs.append(out)
        if len(outs) == 3:
            engine.abort("long")
    assert outs[-1].finished and outs[-1].finish_reason == "abort"
    assert len(outs) < 50
    await wait_for(lambda: all_blocks_free(engine))
    engine.engine.scheduler.kv.check_integrity()
    await engine.shutdown(1.0)


async def test_consumer_leaving_aborts_its_request():
    engine = make_engine(sim_decode_base_s=0.002)
    stream = engine.generate("gone", [400] * 40, SamplingParams(max_tokens=2000,
                                                                ignore_eos=True))
    async for _ in stream:
        break
    await stream.aclose()
    await wait_for(lambda: all_blocks_free(engine))
    assert engine.metrics.success["abort"]._value.get() == 1
    await engine.shutdown(1.0)


async def test_shutdown_drains_then_aborts_leftovers():
    engine = make_engine(sim_decode_base_s=0.002)
    quick = asyncio.create_task(collect(engine, "quick", [500] * 5,
                                        SamplingParams(max_tokens=5, ignore_eos=True)))
    slow = asyncio.create_task(collect(engine, "slow", [501] * 5,
                                       SamplingParams(max_tokens=3000,
                                                      ignore_eos=True)))
    await asyncio.sleep(0.05)
    await engine.shutdown(drain_timeout_s=0.3)
    quick_outs, slow_outs = await asyncio.wait_for(asyncio.gather(quick, slow), 5)
    assert quick_outs[-1].finish_reason == "length"
    assert slow_outs[-1].finish_reason == "abort"
    assert not engine.is_running
    with pytest.raises(EngineShutDown):
        await collect(engine, "late", [1, 2], SamplingParams())


async def test_errors_reach_the_stream_and_the_loop_survives():
    engine = make_engine(num_blocks=4)
    outs = await collect(engine, "huge", [600] * 100, SamplingParams(max_tokens=10))
    assert len(outs) == 1 and outs[0].finish_reason == "error"
    assert "max_model_len 64" in outs[0].error
    ok = await collect(engine, "small", [600] * 3, SamplingParams(max_tokens=2))
    assert ok[-1].finish_reason == "length"
    await engine.shutdown(0.1)


async def test_duplicate_live_request_id_is_rejected():
    engine = make_engine(sim_decode_base_s=0.002)
    gen = engine.generate("dup", [1, 2], SamplingParams(max_tokens=500, ignore_eos=True))
    await gen.__anext__()
    with pytest.raises(ValueError, match="duplicate"):
        await collect(engine, "dup", [1, 2], SamplingParams())
    await gen.aclose()
    await engine.shutdown(0.1)


async def test_idle_engine_does_not_spin():
    engine = make_engine()
    assert engine.max_model_len == 256 * 16  # capped by the KV cache
    await collect(engine, "one", [700] * 8, SamplingParams(max_tokens=2))
    steps = engine.engine.num_steps
    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    await asyncio.sleep(0.4)
    used = resource.getrusage(resource.RUSAGE_SELF).ru_utime - before
    assert engine.engine.num_steps == steps
    assert used < 0.1
    await engine.shutdown(0.1)


async def test_kv_summary_hashes_are_reproducible_from_token_ids():
    engine = make_engine()
    prompt = list(range(1000, 1050))
    await collect(engine, "a", prompt, SamplingParams(max_tokens=1))
    summary = engine.kv_summary()
    assert summary["block_size"] == 16 and summary["hash"]["algorithm"] == "xxh64"
    expected = [format(h, "016x") for h in hash_prompt_blocks(prompt, 16)]
    assert len(expected) == 3 and set(expected) <= set(summary["resident_hashes"])
    assert summary["num_free_blocks"] == summary["num_blocks"]  # cached yet reusable
    stats = engine.stats()
    assert stats["prefix_cache_queries"] == 50 and stats["prefix_cache_hits"] == 0
    await collect(engine, "b", prompt, SamplingParams(max_tokens=1))
    assert engine.stats()["prefix_cache_hits"] == 48
    await engine.shutdown(0.1)

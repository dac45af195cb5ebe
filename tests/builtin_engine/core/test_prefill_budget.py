"""While requests decode, a step's prefill chunks share a bounded number of tokens, so a long
prompt arriving cannot stall running streams; alone, a prompt takes the whole budget."""
from __future__ import annotations

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.core.conftest import random_prompts, sim_engine

PARAMS = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)


def prefill_tokens_per_step(engine, streams, long_prompt):
    for i, p in enumerate(streams):
        engine.add_request(f"s{i}", p, PARAMS)
    seen, sizes, outputs = set(), [], {}
    while engine.has_unfinished():
        out = engine.scheduler.schedule()
        decoding = [s for s in out.scheduled if len(s.token_ids) == 1]
        sizes.append((len(decoding), sum(len(s.token_ids) for s in out.scheduled
                                         if len(s.token_ids) > 1)))
        sampled = engine.executor.execute(out)
        for o in engine.scheduler.update_from_output(out, sampled):
            outputs.setdefault(o.request_id, []).extend(o.new_token_ids)
            seen.add(o.request_id)
        engine._finish_step([], 0)
        if long_prompt is not None and len(seen) == len(streams):
            engine.add_request("long", long_prompt, SamplingParams(max_tokens=2))
            long_prompt = None
    return sizes, outputs


def test_prefill_is_bounded_while_streams_decode():
    streams, (long_prompt,) = random_prompts(3, 8, 8, seed=1), random_prompts(1, 600, 600)
    engine = sim_engine(max_num_batched_tokens=512, decode_prefill_budget=16,
                        decode_prefill_ratio=2)
    sizes, outputs = prefill_tokens_per_step(engine, streams, long_prompt)
    with_decodes = [p for d, p in sizes if d > 0]
    assert max(with_decodes) <= max(16, 2 * 3)
    assert sum(1 for p in with_decodes if p == 16) > 10  # the long prompt went 16 at a time
    plain = sim_engine(max_num_batched_tokens=512, decode_prefill_budget=0)
    plain_sizes, plain_outputs = prefill_tokens_per_step(plain, streams, long_prompt)
    assert plain_outputs == outputs  # the chunking never changes tokens
    assert max(p for d, p in plain_sizes if d > 0) == 512 - 3


def test_cap_grows_with_the_decode_batch():
    streams = random_prompts(20, 4, 4, seed=2)
    # 21 rows: the 20 streams and the long prompt, which decodes once prefilled
    for ratio, cap in ((2, 42), (12, 252)):
        engine = sim_engine(max_num_batched_tokens=512, decode_prefill_budget=16, max_num_seqs=32,
                            decode_prefill_ratio=ratio)
        sizes, _ = prefill_tokens_per_step(engine, streams, random_prompts(1, 300, 300)[0])
        assert max(p for d, p in sizes if d == 20) == cap


def test_a_waiting_burst_counts_as_the_rows_it_will_decode_in():
    """4 streams decode while 28 prompts wait: the cap is paced against the 32-row batch the
    burst joins, not the 4 rows decoding now (which let it in 16 tokens a step)."""
    engine = sim_engine(max_num_batched_tokens=512, decode_prefill_budget=16,
                        decode_prefill_ratio=2, max_num_seqs=32)
    for i, p in enumerate(random_prompts(4, 4, 4, seed=3)):
        engine.add_request(f"s{i}", p, PARAMS)
    step(engine)                                 # the streams' prompts: now they decode
    for i, p in enumerate(random_prompts(28, 100, 100, seed=4)):
        engine.add_request(f"b{i}", p, PARAMS)
    out = step(engine)
    decoding = sum(1 for s in out.scheduled if len(s.token_ids) == 1)
    prefill = sum(len(s.token_ids) for s in out.scheduled if len(s.token_ids) > 1)
    assert decoding == 4 and prefill == 2 * 32
    room = engine.scheduler.pacer.room
    assert room(4) == 16 and room(4, rows=32) == 64   # what the rows change


def step(engine):
    out = engine.scheduler.schedule()
    engine.scheduler.update_from_output(out, engine.executor.execute(out))
    engine._finish_step([], 0)
    return out


def test_cpu_default_ratio_and_bad_values():
    import pytest

    from builtin_engine.core.config import EngineConfig
    cpu = EngineConfig(model="m", device="cpu")
    assert (cpu.decode_prefill_budget, cpu.decode_prefill_ratio) == (8, 12)
    cuda = EngineConfig(model="m", device="cuda")
    assert (cuda.decode_prefill_budget, cuda.decode_prefill_ratio) == (512, 2)
    with pytest.raises(ValueError, match="decode_prefill_ratio"):
        EngineConfig(model="m", device="cpu", decode_prefill_ratio=-1)


def test_alone_a_prompt_takes_the_whole_budget():
    engine = sim_engine(max_num_batched_tokens=128, decode_prefill_budget=16)
    sizes, _ = prefill_tokens_per_step(engine, random_prompts(1, 300, 300), None)
    assert sizes[0] == (0, 128)

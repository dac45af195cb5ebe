"""The torch.compile'd decode step on the real model: in float32 greedy tokens identical to
the eager path, one graph for every batch shape after the bounded warm-up, speculative
verification rows through it too, compiled kernels in the configured cache directory; in
bfloat16 the eager path's tokens too; with int8 weights next-token distributions that stay
the eager path's (teacher-forced, so one near tie cannot fork the rest of the text); the
block plan reads only the blocks each row's context covers."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo.utils

from builtin_engine.core.config import COMPILE_ENV, EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.kernels.attention import AttentionMetadata, paged_attention_torch
from builtin_engine.kernels.cpu_activation import cpu_silu_and_mul_available
from builtin_engine.kernels.paged_attention_ops import BlockPlan, paged_decode_attention
from builtin_engine.loader import load_model
from builtin_engine.runner.model_runner import ModelRunner
from tests.builtin_engine.model.driver import BlockAllocator, Sequence

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ",
           "Write a haiku about the sea."]
ARTICLE = ("Article: The council met on Tuesday to discuss the new library. It will have three "
           "floors, a reading garden and a room for children.\nRepeat the article word for "
           "word.\nArticle: The council")


def config(**overrides) -> EngineConfig:
    values = dict(model=MODEL, dtype="float32", num_blocks=128, block_size=16,
                  swap_space_gib=0.0, compile=False)
    values.update(overrides)
    return EngineConfig(**values)


@pytest.fixture(scope="module")
def loaded():
    return load_model(config())


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("inductor")


@pytest.fixture(scope="module")
def compiled_runner(loaded, cache_dir):
    cfg = config(compile=True, compile_cache_dir=str(cache_dir))
    return cfg, ModelRunner(cfg, loaded)


def graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def run(loaded, runner, cfg, prompts, params):
    engine = LLMEngine(cfg, runner, loaded.tokenizer)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), loaded.tokenizer.encode(p), params)
    out = {str(i): [] for i in range(len(prompts))}
    while engine.has_unfinished():
        for o in engine.step():
            assert o.error is None, o.error
            out[o.request_id].extend(o.new_token_ids)
    return out, engine


GREEDY = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
# (mean KL bound, least top-1 agreement) of compiled against eager next-token distributions,
# per quantization, in bfloat16. The compiled step rounds where eager does (see
# compiled_layer) but sums attention in another order, so a value may round to the next
# bfloat16 step, and 30 layers carry it on (measured: mean KL 1.5e-3, top-1 agreement 0.99);
# int8 projections may also run as one fused int8 matmul (inductor's weight-only pattern)
# that scales before rounding (measured: 1.1e-3, 0.98). Both stay inside what bfloat16 and
# int8 themselves move (tests/builtin_engine/model: mean KL against float32 under 0.01 and 0.02).
TRACKING = {None: (5e-3, 0.97), "int8": (5e-3, 0.95)}


def test_startup_line_and_cache_dir(compiled_runner, cache_dir):
    _, runner = compiled_runner
    assert runner.compiled is not None and runner.compiled.warm_up_s > 0
    assert "compiled decode step: inductor" in runner.describe()
    assert any(cache_dir.rglob("*")), "no compiled artefacts in the configured cache dir"


def test_greedy_tokens_identical_to_eager(loaded, compiled_runner):
    cfg, runner = compiled_runner
    before = graphs()
    compiled, _ = run(loaded, runner, cfg, PROMPTS, GREEDY)
    single, _ = run(loaded, runner, cfg, PROMPTS[:1], GREEDY)  # batch of one row
    eager_cfg = config()
    eager_runner = ModelRunner(eager_cfg, loaded)
    assert eager_runner.compiled is None
    eager, _ = run(loaded, eager_runner, eager_cfg, PROMPTS, GREEDY)
    assert compiled == eager
    assert single["0"] == eager["0"]
    # Batches of 3..1 rows and every context width reused the warm-up's one graph.
    assert graphs() == before


def test_prompts_arriving_while_others_decode_take_the_mixed_graph(loaded, compiled_runner):
    """Staggered arrivals and chunked prefill give steps of decode rows beside prompt
    chunks: they run through the mixed graph (decode rows reordered first, a lone decode row
    twinned) and give the eager path's greedy tokens, with no graph compiled after warm-up."""
    cfg, runner = compiled_runner
    small = dict(max_num_batched_tokens=40, max_num_seqs=8, decode_prefill_budget=40)
    prompts = [ARTICLE] + [" ".join([p] * 4) for p in PROMPTS]  # all longer than SHORT_QUERY

    def staggered(r, c):
        engine = LLMEngine(c, r, loaded.tokenizer)
        out = {str(i): [] for i in range(len(prompts))}
        pending = list(enumerate(prompts))
        while pending or engine.has_unfinished():
            if pending:  # one new prompt every other step
                i, p = pending.pop(0)
                engine.add_request(str(i), loaded.tokenizer.encode(p), GREEDY)
            for _ in range(2):
                for o in engine.step():
                    assert o.error is None, o.error
                    out[o.request_id].extend(o.new_token_ids)
        return out

    before_graphs, before_mixed = graphs(), runner.compiled.steps["mixed"]
    compiled = staggered(runner, config(compile=True, compile_cache_dir=cfg.compile_cache_dir,
                                        **small))
    assert runner.compiled.steps["mixed"] - before_mixed >= 3
    eager = staggered(ModelRunner(config(**small), loaded), config(**small))
    assert compiled == eager
    assert graphs() == before_graphs


def test_speculative_verification_through_compiled_step(loaded, compiled_runner):
    cfg, runner = compiled_runner
    spec_cfg = config(compile=True, compile_cache_dir=cfg.compile_cache_dir,
                      speculative_ngram=3, num_speculative_tokens=4)
    spec_runner = ModelRunner(spec_cfg, loaded)
    before = graphs()
    spec, engine = run(loaded, spec_runner, spec_cfg, [ARTICLE], GREEDY)
    plain, plain_engine = run(loaded, runner, cfg, [ARTICLE], GREEDY)
    assert spec == plain
    assert engine.num_steps < plain_engine.num_steps  # drafts were accepted
    assert graphs() == before


def test_compile_default_by_device_and_env(monkeypatch):
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    assert EngineConfig(device="cpu").resolved_compile() == (True, "default on cpu")
    assert EngineConfig(device="cuda").resolved_compile()[0] is False
    monkeypatch.setenv(COMPILE_ENV, "0")
    assert EngineConfig(device="cpu").resolved_compile() == (False, f"{COMPILE_ENV}=0")
    assert EngineConfig(device="cpu", compile=True).resolved_compile() == (True, "requested")


def test_block_plan_reads_only_covered_blocks_and_matches_eager():
    torch.manual_seed(0)
    block, kv_heads, group, dim = 16, 3, 3, 64
    k_cache, v_cache = (torch.randn(40, block, kv_heads, dim) for _ in range(2))
    lens = [1, 17, 80, 5, 33]  # one block, a block and a slot, five full blocks, ...
    used = [-(-n // block) for n in lens]
    ids = iter((torch.randperm(39) + 1).tolist())
    tables = torch.tensor([[next(ids) if j < u else 0 for j in range(max(used))]
                           for u in used], dtype=torch.int32)
    plan = BlockPlan.build(tables, torch.tensor(lens), block)
    assert plan.blocks.tolist() == [b for row, u in zip(tables.tolist(), used) for b in row[:u]]
    assert plan.fill.tolist() == [1, 16, 1, 16, 16, 16, 16, 16, 5, 16, 16, 1]
    q = torch.randn(len(lens), kv_heads * group, dim)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(len(lens), dtype=torch.int64),
        query_start_loc=torch.arange(len(lens) + 1), seq_lens=torch.tensor(lens),
        block_tables=tables, query_lens=[1] * len(lens), seq_lens_list=lens,
        max_query_len=1, max_seq_len=max(lens))
    torch.testing.assert_close(paged_decode_attention(q, k_cache, v_cache, plan, 0.125),
                               paged_attention_torch(q, k_cache, v_cache, meta, 0.125))


def lockstep(eager, compiled, tokenizer, prompts, steps: int):
    """Both runners decode the same text (the eager path's greedy tokens), batched; returns
    per-row-step (KL(eager || compiled), top-1 equal) of the next-token distributions."""
    seqs = {r: [Sequence(str(i), tokenizer.encode(p), GREEDY) for i, p in enumerate(prompts)]
            for r in (eager, compiled)}
    allocs = {r: BlockAllocator(r.block_size) for r in (eager, compiled)}
    stats = []
    for _ in range(steps):
        logprobs = {}
        for r in (eager, compiled):
            batch = r._prepare([s.schedule(allocs[r]) for s in seqs[r]])
            with torch.inference_mode():
                hidden = r._forward(batch)
                logits = r.model.compute_logits(hidden[batch.sample_rows])
            logprobs[r] = logits.float().log_softmax(-1)
        ref, got = logprobs[eager], logprobs[compiled]
        kl = (ref.exp() * (ref - got)).sum(-1)
        stats += list(zip(kl.tolist(), (ref.argmax(-1) == got.argmax(-1)).tolist()))
        for r in (eager, compiled):
            for s, token in zip(seqs[r], ref.argmax(-1).tolist()):
                s.output.append(token)
    return stats


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_bfloat16_compiled_next_tokens_track_eager(cache_dir, quantization):
    overrides = dict(dtype="bfloat16", quantization=quantization)
    loaded_half = load_model(config(**overrides))
    eager = ModelRunner(config(**overrides), loaded_half)
    compiled = ModelRunner(config(compile=True, compile_cache_dir=str(cache_dir), **overrides),
                           loaded_half)
    assert compiled.compiled is not None and "cpu bfloat16 (requested)" in compiled.describe()
    # the C++ SiLU-and-mul runs inside the graph wherever it builds (AVX512-BF16)
    silu = "C++ kernel" if cpu_silu_and_mul_available() else "inductor"
    assert f"SiLU-and-mul {silu}" in compiled.describe()
    stats = lockstep(eager, compiled, loaded_half.tokenizer, PROMPTS + [ARTICLE], 24)
    kls = [kl for kl, _ in stats]
    mean_kl, agree = sum(kls) / len(kls), sum(same for _, same in stats) / len(stats)
    print(f"bfloat16 {quantization or ''} compiled vs eager: mean KL {mean_kl:.2e}, max "
          f"{max(kls):.2e}, top-1 agreement {agree:.3f} over {len(stats)} row-steps")
    max_mean_kl, min_agree = TRACKING[quantization]
    assert mean_kl < max_mean_kl and agree >= min_agree

"""The torch.compile'd decode step on the real model (float32): greedy tokens identical to the
eager path, one graph for every batch shape after the bounded warm-up, speculative
verification rows through it too, compiled kernels in the configured cache directory."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo.utils

from builtin_engine.config import COMPILE_ENV, EngineConfig
from builtin_engine.llm_engine import LLMEngine
from builtin_engine.loader import load_model
from builtin_engine.model_runner import ModelRunner
from builtin_engine.sampling_params import SamplingParams

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

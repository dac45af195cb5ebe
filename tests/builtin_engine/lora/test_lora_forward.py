"""LoRA adapters change the real model's output exactly as HF+peft does, per request."""
from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest
import torch
from safetensors.torch import save_file

from builtin_engine.core.engine import AsyncEngine
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.errors import EngineError
from builtin_engine.runner.model_runner import ModelRunner
from builtin_engine.serving.adapters import AdapterRegistry
from builtin_engine.serving.server import create_engine_app

PROMPTS = ["What is the capital of France?", "Write a haiku about the ocean.",
           "List three prime numbers greater than 100."]
NEW_TOKENS = 12
PARAMS = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def runner(engine_config, loaded) -> ModelRunner:
    return ModelRunner(engine_config, loaded)


@pytest.fixture(scope="module")
def registry(runner, peft_model) -> AdapterRegistry:
    _, dirs = peft_model
    registry = AdapterRegistry(max_loras=4, store=runner.lora_store)
    for name, path in dirs.items():
        asyncio.run(registry.load(name, str(path)))
    return registry


@pytest.fixture(scope="module")
def prompt_ids(loaded) -> list[list[int]]:
    tok = loaded.tokenizer
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
            for p in PROMPTS]


def run_engine(engine_config, runner, loaded, requests) -> list[list[int]]:
    """Greedy tokens of (prompt ids, adapter name | None) requests, all batched together."""
    engine = LLMEngine(engine_config, runner, loaded.tokenizer)
    for i, (ids, lora) in enumerate(requests):
        engine.add_request(str(i), ids, PARAMS, lora=lora,
                           extra_key=lora.encode() if lora else None)
    out: dict[str, list[int]] = {str(i): [] for i in range(len(requests))}
    steps = 0
    while engine.has_unfinished():
        for o in engine.step():
            assert o.error is None, o.error
            out[o.request_id].extend(o.new_token_ids)
        steps += 1
        if steps == 1:  # one forward pass held every request
            assert len(engine.scheduler.running) == len(requests)
    return [out[str(i)] for i in range(len(requests))]


def hf_greedy(model, ids: list[int], adapter: str | None) -> list[int]:
    """Argmax decoding with HF+peft that, like ignore_eos, never stops or masks EOS."""
    context = model.disable_adapter() if adapter is None else contextlib.nullcontext()
    if adapter is not None:
        model.set_adapter(adapter)
    tokens = list(ids)
    with torch.inference_mode(), context:
        for _ in range(NEW_TOKENS):
            logits = model(input_ids=torch.tensor([tokens])).logits[0, -1]
            tokens.append(int(logits.argmax()))
    return tokens[len(ids):]


def test_adapter_tokens_match_peft(engine_config, runner, loaded, registry, peft_model,
                                   prompt_ids):
    model, _ = peft_model
    changed = 0
    for ids in prompt_ids:
        [ours_a] = run_engine(engine_config, runner, loaded, [(ids, "one")])
        assert ours_a == hf_greedy(model, ids, "one")
        [base] = run_engine(engine_config, runner, loaded, [(ids, None)])
        changed += ours_a != base
    assert changed >= 2  # the adapter really changes the output
    [ours_b] = run_engine(engine_config, runner, loaded, [(prompt_ids[0], "two")])
    assert ours_b == hf_greedy(model, prompt_ids[0], "two")


def test_without_adapter_equals_base_model(engine_config, runner, loaded, registry, peft_model,
                                           prompt_ids):
    model, _ = peft_model
    for ids in prompt_ids[:2]:
        [ours] = run_engine(engine_config, runner, loaded, [(ids, None)])
        assert ours == hf_greedy(model, ids, None)


def test_mixed_batch_equals_each_request_alone(engine_config, runner, loaded, registry,
                                               prompt_ids):
    p0, p1, p2 = prompt_ids
    requests = [(p0, "one"), (p1, None), (p2, "two"), (p0, "two"), (p1, "one")]
    together = run_engine(engine_config, runner, loaded, requests)
    alone = [run_engine(engine_config, runner, loaded, [r])[0] for r in requests]
    assert together == alone
    assert together[0] != together[3]  # same prompt, different adapters, different text


def _write_adapter(path, config: dict, tensors: dict) -> str:
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", **config}))
    save_file(tensors, str(path / "adapter_model.safetensors"))
    return str(path)


async def test_unsupported_adapters_are_rejected_with_400(runner, loaded, tmp_path):
    registry = AdapterRegistry(store=runner.lora_store)
    hidden = loaded.llama_config.hidden_size
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"
    wrong_shape = _write_adapter(tmp_path / "shape", {"r": 4, "lora_alpha": 8}, {
        key.format("A"): torch.zeros(4, hidden + 1), key.format("B"): torch.zeros(hidden, 4)})
    head = "base_model.model.lm_head.lora_{}.weight"
    lm_head = _write_adapter(tmp_path / "head", {"r": 4, "target_modules": ["lm_head"]}, {
        head.format("A"): torch.zeros(4, hidden), head.format("B"): torch.zeros(10, 4)})
    half = _write_adapter(tmp_path / "half", {"r": 4}, {key.format("A"): torch.zeros(4, hidden)})
    for path, words in ((wrong_shape, "do not fit"), (lm_head, "lm_head"), (half, "lora_B")):
        with pytest.raises(EngineError) as info:
            await registry.load("bad", path)
        assert info.value.status == 400 and words in str(info.value), str(info.value)
        assert not registry.is_loaded("bad") and "bad" not in runner.lora_store
    app = create_engine_app(AsyncEngine(runner.config, runner, loaded.tokenizer),
                            loaded.tokenizer, "base", 2048, adapters=registry)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://engine") as client:
        resp = await client.post("/v1/load_lora_adapter",
                                 json={"lora_name": "bad", "lora_path": wrong_shape})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_lora_adapter"


async def test_served_adapter_then_unloaded_is_404(runner, loaded, peft_model, prompt_ids):
    _, dirs = peft_model
    registry = AdapterRegistry(store=runner.lora_store)
    engine = AsyncEngine(runner.config, runner, loaded.tokenizer)
    app = create_engine_app(engine, loaded.tokenizer, "base", 2048, adapters=registry)
    body = {"model": "served-a", "prompt": prompt_ids[0], "max_tokens": NEW_TOKENS,
            "temperature": 0, "ignore_eos": True}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://engine", timeout=120) as client:
            missing = await client.post("/v1/completions", json=body)
            assert missing.status_code == 404
            loaded_resp = await client.post("/v1/load_lora_adapter", json={
                "lora_name": "served-a", "lora_path": str(dirs["one"])})
            assert loaded_resp.status_code == 200, loaded_resp.text
            with_lora = await client.post("/v1/completions", json=body)
            assert with_lora.status_code == 200, with_lora.text
            base = await client.post("/v1/completions", json={**body, "model": "base"})
            assert base.status_code == 200, base.text
            assert with_lora.json()["choices"][0]["text"] != base.json()["choices"][0]["text"]
            unload = await client.post("/v1/unload_lora_adapter", json={"lora_name": "served-a"})
            assert unload.status_code == 200, unload.text
            assert "served-a" not in runner.lora_store
            gone = await client.post("/v1/completions", json=body)
            assert gone.status_code == 404
            assert gone.json()["error"]["code"] == "model_not_found"
    finally:
        await engine.shutdown(1.0)


def test_adapter_unloaded_after_admission_fails_only_its_request(
        engine_config, runner, loaded, registry, peft_model, prompt_ids):
    _, dirs = peft_model
    asyncio.run(registry.load("gone", str(dirs["one"])))
    engine = LLMEngine(engine_config, runner, loaded.tokenizer)
    engine.add_request("lora", prompt_ids[0], PARAMS, lora="gone", extra_key=b"gone")
    engine.add_request("plain", prompt_ids[1], PARAMS)
    runner.lora_store.remove("gone")  # between admission and the first engine step
    outputs: dict[str, list] = {"lora": [], "plain": []}
    errors = {}
    while engine.has_unfinished():
        for o in engine.step():
            outputs[o.request_id].extend(o.new_token_ids)
            if o.error:
                errors[o.request_id] = o.error
    assert list(errors) == ["lora"] and "'gone' is not loaded" in errors["lora"]
    assert outputs["lora"] == []
    [alone] = run_engine(engine_config, runner, loaded, [(prompt_ids[1], None)])
    assert outputs["plain"] == alone
    assert engine.scheduler.kv.num_free_blocks == engine.scheduler.kv.num_blocks

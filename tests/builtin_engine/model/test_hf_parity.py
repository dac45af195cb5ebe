"""Greedy output of this engine is token-identical to HF transformers on the same GGUF."""
from __future__ import annotations

import torch

from tests.builtin_engine.model.driver import generate

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the ocean.",
    "List three prime numbers greater than 100.",
    "Explain recursion to a five year old.",
    "Translate 'good morning' into Spanish and German.",
    "def fibonacci(n):\n    # complete this Python function",
    "Give me 2 tips for sleeping better 🙂",
    "What is 17 * 23? Show your work.",
]
NEW_TOKENS = 20


def _hf_greedy(hf_model, prompt_ids: list[int], eos: int) -> list[int]:
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([prompt_ids]), max_new_tokens=NEW_TOKENS,
                                do_sample=False, eos_token_id=eos, pad_token_id=eos)
    return out[0, len(prompt_ids):].tolist()


def test_greedy_matches_transformers(loaded, runner, hf_model):
    tok = loaded.tokenizer
    for prompt in PROMPTS:
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": prompt}]))
        ours = generate(runner, ids, NEW_TOKENS, stop_ids={tok.eos_token_id})
        theirs = _hf_greedy(hf_model, ids, tok.eos_token_id)
        assert ours == theirs, f"prompt {prompt!r}: {tok.decode(ours)!r} != {tok.decode(theirs)!r}"
        assert len(ours) >= 5


def test_capital_of_france(loaded, runner):
    tok = loaded.tokenizer
    ids = tok.encode(tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]))
    answer = tok.decode(generate(runner, ids, 20, stop_ids=tok.stop_token_ids))
    assert "Paris" in answer, answer


def test_hf_directory_loads_the_same_model(tmp_path, loaded, runner, hf_model, hf_tokenizer):
    """config.json + model.safetensors + tokenizer.json written by transformers."""
    from safetensors.torch import save_file

    from builtin_engine.core.config import EngineConfig
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner

    # save_pretrained refuses GGUF-born models, so write the directory piece by piece.
    weights = {k: v.contiguous() for k, v in hf_model.state_dict().items() if k != "lm_head.weight"}
    save_file(weights, str(tmp_path / "model.safetensors"))
    hf_model.config.save_pretrained(tmp_path)
    hf_tokenizer.save_pretrained(tmp_path)
    config = EngineConfig(model=str(tmp_path), dtype="float32", num_blocks=32)
    from_dir = load_model(config)
    assert from_dir.llama_config == loaded.llama_config
    tok = from_dir.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": PROMPTS[1]}]))
    assert ids == loaded.tokenizer.encode(loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[1]}]))
    assert tok.eos_token_id == loaded.tokenizer.eos_token_id
    assert (generate(ModelRunner(config, from_dir), ids, 8)
            == generate(runner, ids, 8))

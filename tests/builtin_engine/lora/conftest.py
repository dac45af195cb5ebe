"""Shared fixtures: the packaged SmolLM2 (this engine and HF) and two random PEFT adapters."""
from __future__ import annotations

import pytest
import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.loader import load_model, resolve_model

MODEL = "smollm2-135m-instruct"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def engine_config() -> EngineConfig:
    return EngineConfig(model=MODEL, dtype="float32", num_blocks=128, block_size=16,
                        swap_space_gib=0.0)


@pytest.fixture(scope="module")
def loaded(engine_config):
    return load_model(engine_config)


@pytest.fixture(scope="module")
def peft_model(tmp_path_factory):
    """HF SmolLM2 wrapped by peft with adapters "one" and "two" (random, non-zero B) saved to
    tmp dirs; returns (peft model, {name: adapter dir})."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    gguf = resolve_model(MODEL).path
    base = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                dtype=torch.float32).eval()
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False)
    model = get_peft_model(base, lora, adapter_name="one")
    model.add_adapter("two", lora)
    dirs = {}
    for seed, name in enumerate(("one", "two")):
        _randomise(model, name, seed)
        root = tmp_path_factory.mktemp(f"lora-{name}")
        model.save_pretrained(str(root), selected_adapters=[name])
        dirs[name] = root / name  # peft saves a non-"default" adapter in a sub-directory
        assert (dirs[name] / "adapter_model.safetensors").is_file()
    return model.eval(), dirs


def _randomise(model, adapter: str, seed: int) -> None:
    # Small weights: the delta changes the greedy text without drowning the base model.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if f".lora_A.{adapter}." in name or f".lora_B.{adapter}." in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.04)

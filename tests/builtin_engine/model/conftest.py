"""Shared fixtures: the packaged SmolLM2 GGUF, loaded by this engine and (for parity) by HF."""
from __future__ import annotations

import pytest
import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.loader import load_model, resolve_model
from builtin_engine.runner.model_runner import ModelRunner

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def engine_config() -> EngineConfig:
    return EngineConfig(model=MODEL, dtype="float32", num_blocks=256, block_size=16,
                        swap_space_gib=0.05)


@pytest.fixture(scope="module")
def loaded(engine_config):
    return load_model(engine_config)


@pytest.fixture(scope="module")
def runner(engine_config, loaded) -> ModelRunner:
    return ModelRunner(engine_config, loaded)


@pytest.fixture(scope="module")
def gguf_path():
    return resolve_model(MODEL).path


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


@pytest.fixture(scope="module")
def hf_model(gguf_path):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 dtype=torch.float32)
    return model.eval()

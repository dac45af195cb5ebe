"""The packaged SmolLM2 in float32 (the reference dtype), loaded once for this folder."""
from __future__ import annotations

import pytest

from builtin_engine.core.config import EngineConfig
from builtin_engine.loader import load_model

MODEL = "smollm2-135m-instruct"


def real_config(**overrides) -> EngineConfig:
    values = dict(model=MODEL, dtype="float32", num_blocks=96, block_size=16, swap_space_gib=0.0)
    values.update(overrides)
    return EngineConfig(**values)


@pytest.fixture(scope="package")   # its memory is freed once the folder is done
def loaded_fp32():
    return load_model(real_config())

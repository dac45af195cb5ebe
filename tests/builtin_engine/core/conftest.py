"""Engines on the simulated executor with zero modelled cost: fast and deterministic."""
from __future__ import annotations

import random

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.llm_engine import LLMEngine
from builtin_engine.core.simulator import SimulatedExecutor

ZERO_COST = dict(sim_prefill_s_per_token=0.0, sim_decode_base_s=0.0, sim_decode_s_per_seq=0.0,
                 sim_decode_s_per_kv_token=0.0)


def sim_config(**overrides) -> EngineConfig:
    values = dict(simulate=True, num_blocks=256, block_size=16, swap_space_gib=0.0,
                  max_num_batched_tokens=256, max_num_seqs=32, **ZERO_COST)
    values.update(overrides)
    return EngineConfig(**values)


def sim_engine(**overrides) -> LLMEngine:
    config = sim_config(**overrides)
    return LLMEngine(config, SimulatedExecutor(config), eos_token_id=2)


def random_prompts(n: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, 30000) for _ in range(rng.randint(lo, hi))] for _ in range(n)]

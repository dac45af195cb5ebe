"""Tier tests: a migrated SQLite registry, a snapshot source on it, PEFT adapter dirs, and
simulated builtin engines (real processes, real HTTP)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from control_plane.snapshots import SnapshotSource
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from tests.conftest import free_port, start_process, stop_process, wait_http
from tests.registry.databases import sqlite_url  # noqa: F401

# A fast simulated engine: the real scheduler and tokenizer, no model weights.
SIM_ARGS = {"simulate": True, "num_blocks": 64, "sim_context_length": 512,
            "sim_decode_base_s": 0.001, "sim_prefill_s_per_token": 0.0}
SIM_MODEL = "smollm2-135m-instruct"


@pytest.fixture
def sessions(sqlite_url):
    upgrade(sqlite_url, progress=None)
    factory = make_session_factory(sqlite_url)
    with factory.begin() as s:
        q.bump_snapshot_version(s)
    yield factory
    factory.kw["bind"].dispose()


@pytest.fixture
def snapshots(sessions):
    source = SnapshotSource(sessions)
    source.refresh()
    return source


def add_model(sessions, name: str, tier: str) -> None:
    with sessions.begin() as s:
        q.create_model(s, name, tier=tier)
        q.bump_snapshot_version(s)


def make_peft_dir(root: Path, name: str, rank: int = 4, hidden: int = 576) -> Path:
    """A minimal PEFT LoRA directory: adapter_config.json + adapter_model.safetensors."""
    path = root / name
    path.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
              "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": SIM_MODEL}
    (path / "adapter_config.json").write_text(json.dumps(config))
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file({f"{prefix}.lora_A.weight": np.zeros((rank, hidden), np.float32),
               f"{prefix}.lora_B.weight": np.zeros((hidden, rank), np.float32)},
              str(path / "adapter_model.safetensors"))
    return path


@contextlib.contextmanager
def running_adapter_engine(lora_root: Path, name: str = "adapter_engine"):
    """A simulated engine with the runtime LoRA routes (2 slots) loading adapters from under
    `lora_root`; yields its OpenAI base URL. Its log: lora_root / f"{name}.log"."""
    port = free_port()
    args = ["-m", "builtin_engine", "serve", "--served-model-name", "base", "--port", str(port),
            "--model", SIM_MODEL, "--max-loras", "2", "--lora-roots", str(lora_root)]
    for key, value in SIM_ARGS.items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    proc = start_process(args, log_path=lora_root / f"{name}.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc)


@pytest.fixture
def adapter_engine(tmp_path):
    with running_adapter_engine(tmp_path) as url:
        yield url

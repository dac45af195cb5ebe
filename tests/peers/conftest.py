"""Real engines behind the gateway: one vLLM CPU server and one builtin engine for this folder.

The set-up installs what it needs (bench/install_engines.sh: vLLM in its own venv, the model as
an HF directory, llama-server), cached under $INFERPLANE_PEERS_DIR (default /work/peers-cache),
so only the first run on a machine pays for it. vLLM takes 90-200 s to start (torch.compile
warm-up): it starts once for the folder, and test_vllm_resume.py, which kills it, sorts last.

Tests marked `llamacpp` need llama-server, whose build takes ~8 minutes of both cores (far more
on a busy host): `make test` runs them when the build is cached, `make test-peers`
(INFERPLANE_TEST_LLAMACPP=1) builds it first when it is not.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from bench import _real_engines as real
from gateway.settings import GatewaySettings
from registry.snapshot import BackendView, ModelView
from tests.gateway.conftest import KEYS, MutableSource, snapshot, start_gateway

VLLM_START_S = 600
INSTALL_AND_START_S = 3600


def pytest_configure(config):
    config.addinivalue_line("markers", "llamacpp: needs llama-server (built by make test-peers)")


def _llamacpp_wanted() -> bool:
    # a cached build costs the tests seconds; only building it (~8 min of both cores) is opt-in
    return bool(os.environ.get("INFERPLANE_TEST_LLAMACPP")) or (
        real.peers_dir() / "llama.cpp" / "llama-server").exists()


def pytest_collection_modifyitems(config, items):
    for item in items:
        # the first test's set-up may install vLLM (~25 min on a busy fresh host) and start it
        item.add_marker(pytest.mark.timeout(INSTALL_AND_START_S), append=False)
    if _llamacpp_wanted():
        return
    chosen, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("llamacpp") else chosen).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen


@pytest.fixture(scope="package")
def peer_dirs() -> Path:
    return real.install("vllm", "hf-model")


class VllmServer:
    """The folder's vLLM (KV events and runtime LoRA on), started again only if a test killed
    it and another test needs it after all (test_vllm_resume.py sorts last so none does).
    `begin()` spawns it without waiting, so that another engine can warm up at the same time;
    `get()` waits until it is ready."""

    def __init__(self, dirs: Path, log: Path):
        self.dirs, self.log, self.engine, self.ready = dirs, log, None, False

    def begin(self) -> None:
        if self.engine is None or not self.engine.alive():
            self.engine = real.start_vllm(self.dirs, real.free_port(), self.log, kv_events=True,
                                          lora_rank=8)
            self.ready = False

    def get(self):
        self.begin()
        if not self.ready:
            self.engine.wait_ready(VLLM_START_S)
            self.ready = True
        return self.engine

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()


@pytest.fixture(scope="package")   # stopped once the folder is done
def vllm_server(peer_dirs, tmp_path_factory):
    server = VllmServer(peer_dirs, tmp_path_factory.mktemp("vllm") / "vllm.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vllm(vllm_server):
    return vllm_server.get()


@pytest.fixture(scope="package")
def builtin(tmp_path_factory):
    """A builtin engine serving the same model (the second backend: resume, routing)."""
    log = tmp_path_factory.mktemp("builtin") / "builtin.log"
    engine = real.start_builtin(real.free_port(), log, "--max-num-seqs", "8", "--enforce-eager")
    engine.wait_ready(300)
    yield engine
    engine.stop()


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_lora(dirs: Path, out: Path, seed: int = 0) -> Path:
    """A rank-8 PEFT adapter for SmolLM2 in `out`, small random weights drawn from `seed`
    (enough to change the greedy text)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(dirs / "smollm2-hf"), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS,
                                            init_lora_weights=False))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.04)
    model.save_pretrained(str(out))
    return out


def backend_of(engine, backend_id: str, adapters: tuple[str, ...] = ()) -> BackendView:
    return BackendView(id=backend_id, url=engine.url, engine=engine.kind,
                       served_model=real.SERVED, gpu=None, weight=1.0, tier="hot",
                       state="ready", adapters=adapters, version="v1")


def model_of(backends, routing: str = "round_robin", adapters: tuple[str, ...] = ()) -> ModelView:
    # a large context length: the engine itself must refuse prompts that are too long
    return ModelView(name="m", context_length=1_000_000, backends=tuple(backends),
                     routing=routing, fallbacks=(), tier="hot", price_in_per_1k=0.0,
                     price_out_per_1k=0.0, splits=(), adapters=adapters)


@contextlib.contextmanager
def gateway(models, **settings):
    """A gateway (uvicorn thread, real HTTP) in front of `models`; yields tests.gateway's
    Gateway (gw.client() sends the user key)."""
    settings.setdefault("routing", {"load_poll_interval_s": 0.2})
    settings.setdefault("timeouts", {"first_token": 120, "total": 300})
    gw, server, thread = start_gateway(GatewaySettings.model_validate(settings),
                                       MutableSource(snapshot(models)))
    try:
        yield gw
    finally:
        server.should_exit = True
        thread.join(timeout=10)


USER_KEY = KEYS["user"]

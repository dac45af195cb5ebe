"""Real engines on this machine: vLLM CPU, llama.cpp's llama-server and the builtin engine, each
a subprocess on a loopback port, for tests/peers and `inferplane bench routing_peers`.

    dirs = install("vllm", "hf-model")          # bench/install_engines.sh, cached
    engine = start_vllm(dirs, port=free_port(), log_path=Path("vllm.log"), kv_events=True)
    engine.wait_ready(timeout=420)
    ... engine.url (…/v1), engine.root, engine.kv_endpoint, engine.replay_endpoint ...
    engine.stop()
    config = vllm_model_config(dirs, tier="cold")   # the same recipe for an engine the
                                                    # control plane starts (inferplane.yaml)

vLLM is started the way ../shared/peers/README.md found fastest here: float32 (bfloat16 changes
the first chat token), one OpenMP thread bound with Intel OpenMP preloaded, a small KV cache.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.routing_bench import free_port  # noqa: F401  (re-exported for tests/peers)
from common.vocabulary import EngineKind
from control_plane.supervisor import EngineSpec

ROOT = Path(__file__).resolve().parents[1]
SERVED = "smollm2"


def peers_dir() -> Path:
    return Path(os.environ.get("INFERPLANE_PEERS_DIR", "/work/peers-cache"))


def install(*parts: str, timeout: float = 1800) -> Path:
    """Run bench/install_engines.sh for `parts` (skipped when cached); the cache folder."""
    out = peers_dir()
    subprocess.run(["bash", str(ROOT / "bench" / "install_engines.sh"), str(out), *parts],
                   check=True, timeout=timeout, env={**os.environ, "INFERPLANE_PY": sys.executable})
    return out


@dataclass
class RealEngine:
    kind: str              # vllm | llamacpp | builtin (the BackendView.engine value)
    port: int
    proc: subprocess.Popen
    log_path: Path
    extra: dict = field(default_factory=dict)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    @property
    def kv_endpoint(self) -> str | None:
        return self.extra.get("kv_endpoint")

    @property
    def replay_endpoint(self) -> str | None:
        return self.extra.get("replay_endpoint")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.kind} exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(self.root + "/health", timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.kind} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def metrics(self) -> str:
        return httpx.get(self.root + "/metrics", timeout=10, trust_env=False).text

    def kill(self) -> None:
        """SIGKILL the whole process group (vLLM's engine core is a child process)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


def _spawn(kind: str, cmd: list[str], env: dict, port: int, log_path: Path, **extra) -> RealEngine:
    log = open(log_path, "ab")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    log.close()
    return RealEngine(kind, port, proc, log_path, extra)


def vllm_env(dirs: Path, kv_cache_gib: float = 1) -> dict[str, str]:
    """The recipe's environment variables (added to the caller's environment)."""
    return {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": "auto",
            "LD_PRELOAD": str(dirs / "vllm" / "lib" / "libiomp5.so"),
            "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "VLLM_CACHE_ROOT": str(dirs / "vllm-cache"), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            # a fixed seed makes sha256_cbor block hashes the same in every vLLM process
            "PYTHONHASHSEED": "0",
            "VLLM_SERVER_DEV_MODE": "1",   # /reset_prefix_cache (tests of AllBlocksCleared)
            "VLLM_TARGET_DEVICE": "cpu"}


def vllm_args(max_num_seqs: int = 16, lora_rank: int = 0, max_loras: int = 2) -> dict:
    """The recipe's `vllm serve` flags as EngineSpec args (lora_rank 0: no LoRA)."""
    args = {"dtype": "float32", "max_model_len": 2048, "seed": 0, "max_num_seqs": max_num_seqs,
            "prefix_caching_hash_algo": "sha256_cbor"}
    if lora_rank:
        args.update(enable_lora=True, max_lora_rank=lora_rank, max_loras=max_loras)
    return args


def vllm_model_config(dirs: Path, name: str = SERVED, kv_cache_gib: float = 1,
                      **model: object) -> dict:
    """An inferplane.yaml `models:` entry whose engine the control plane starts with this
    recipe; `model` adds keys (tier, routing, engine_args for vllm_args)::

        {"name": "smollm2", "engine": "vllm", "tier": "cold", "executable": ".../vllm-cpu", ...}
    """
    args = model.pop("engine_args", {})
    return {"name": name, "engine": "vllm", "model": str(dirs / "smollm2-hf"),
            "executable": str(dirs / "vllm" / "bin" / "vllm-cpu"),
            "engine_args": vllm_args(**args), "engine_env": vllm_env(dirs, kv_cache_gib), **model}


def start_vllm(dirs: Path, port: int, log_path: Path, kv_events: bool = True,
               lora_rank: int = 0, kv_cache_gib: float = 1, max_num_seqs: int = 16,
               extra_args: tuple[str, ...] = ()) -> RealEngine:
    config = vllm_model_config(dirs, kv_cache_gib=kv_cache_gib, engine_args={
        "max_num_seqs": max_num_seqs, "lora_rank": lora_rank})
    extra = {}
    if kv_events:
        pub, replay = free_port(), free_port()
        extra = {"kv_endpoint": f"tcp://127.0.0.1:{pub}",
                 "replay_endpoint": f"tcp://127.0.0.1:{replay}"}
        config["engine_args"]["kv_events_config"] = {
            "enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv",
            # a host (not "*") endpoint: vLLM connects to it, the gateway binds it (loopback only)
            "endpoint": f"tcp://127.0.0.1:{pub}", "replay_endpoint": f"tcp://127.0.0.1:{replay}"}
    spec = EngineSpec(name=SERVED, model=config["model"], port=port, engine=EngineKind.VLLM,
                      executable=config["executable"], args=config["engine_args"],
                      env=config["engine_env"])
    return _spawn("vllm", spec.command() + list(extra_args), spec.environment(), port, log_path,
                  **extra)


def start_llama_server(dirs: Path, gguf: Path, port: int, log_path: Path,
                       slots: int = 8, ctx: int = 8192) -> RealEngine:
    cmd = [str(dirs / "llama.cpp" / "llama-server"), "-m", str(gguf), "-np", str(slots),
           "-c", str(ctx), "-t", "2", "--host", "127.0.0.1", "--port", str(port),
           "--alias", SERVED, "--metrics", "--seed", "0", *llama_cpu_flags()]
    return _spawn("llamacpp", cmd, dict(os.environ), port, log_path)


def llama_cpu_flags() -> tuple[str, ...]:
    """On CPUs with AMX, ggml moves the Q4_1 weights into its AMX buffers, whose matmul
    (`ggml_backend_amx_mul_mat`, llama.cpp of llama-cpp-python 0.3.36) dies with SIGSEGV on
    the first batch; `--no-repack` keeps them in the plain CPU buffers."""
    from builtin_engine.core.device_defaults import cpu_flags
    return ("--no-repack",) if "amx_int8" in cpu_flags() else ()


def start_builtin(port: int, log_path: Path, *args: str) -> RealEngine:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("INFERPLANE_ENGINE_API_KEY", None)
    cmd = [sys.executable, "-m", "builtin_engine", "serve", "--port", str(port),
           "--served-model-name", SERVED, "--log-level", "warning", *args]
    return _spawn("builtin", cmd, env, port, log_path)

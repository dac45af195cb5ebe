"""Engine configuration: one dataclass shared by the CLI, the server and the engine core."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

# Overrides the device default of EngineConfig.compile (test suites set 0: compiling costs
# each engine start up to a minute on a small CPU; the compile tests ask for it explicitly).
COMPILE_ENV = "INFERPLANE_COMPILE"


@dataclass
class EngineConfig:
    model: str = "smollm2-135m-instruct"  # a known name, a .gguf file or an HF directory
    served_model_name: str | None = None
    device: str = "cpu"
    # auto = bfloat16 on CPUs with native bf16 dot products, float32 elsewhere (resolved at
    # construction; dtype_reason says why). float32 is the reference for exact HF parity.
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    seed: int = 0
    # KV cache
    block_size: int = 16
    num_blocks: int | None = None  # overrides the memory budget
    kv_cache_memory_gib: float = 1.0  # CPU budget
    gpu_memory_utilization: float = 0.9  # CUDA budget
    enable_prefix_caching: bool = True
    watermark: float = 0.01
    # scheduler
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    long_prefill_token_threshold: int = 0  # 0 = no per-request cap beyond the budget
    # While requests decode, one step's prefill chunks take at most what keeps the step under
    # prefill_itl_stretch x the decode rows' own time (prefill_pacer.py learns both costs from
    # step times), never fewer than decode_prefill_budget tokens: running streams'
    # inter-token latency grows by a bounded factor while a long prompt is prefilled (budget
    # 0 = no bound: the whole token budget). Until the costs are learnt: ratio x the decoding
    # requests. None = by device: CPU floor 8, ratio 12 (a decode row costs ~6x a short
    # prompt's token there), elsewhere floor 512, ratio 2. Stretch <= 1: the ratio always.
    decode_prefill_budget: int | None = None
    decode_prefill_ratio: int | None = None
    prefill_itl_stretch: float = 2.5
    max_model_len: int | None = None  # defaults to the model's context length
    preemption_mode: str = "auto"  # recompute | swap | auto
    swap_space_gib: float = 0.5
    # kernels
    attention_backend: str | None = None  # torch | triton; None = by device
    kernels: str | None = None  # torch | triton; None = by device
    # decode CUDA graphs: auto (on CUDA with Triton attention) | off | static (no capture)
    decode_graphs: str = "auto"
    max_graph_batch: int = 256  # larger decode batches run eagerly
    # torch.compile'd decode step (runner/compiled_step.py): None = by device (on for CPU, where it
    # measured faster; CUDA has its graphs); compiled kernels persist in compile_cache_dir
    compile: bool | None = None
    compile_cache_dir: str | None = None  # None = $INFERPLANE_DATA_DIR/inductor or ~/.cache
    quantization: str | None = None  # None | int8 (weight-only linear layers)
    # oneDNN-packed projection weights (kernels/packed_linear.py): None = on for CPU
    pack_weights: bool | None = None
    # n-gram (prompt lookup) speculative decoding: 0 = off, else the n-gram size matched
    speculative_ngram: int = 0
    num_speculative_tokens: int = 4  # drafted tokens verified per step
    # simulated executor (no model compute)
    simulate: bool = False
    sim_prefill_s_per_token: float = 0.0002
    sim_decode_base_s: float = 0.01
    sim_decode_s_per_seq: float = 0.0005
    sim_decode_s_per_kv_token: float = 0.0000005
    sim_context_length: int = 8192
    sim_vocab_size: int = 32000
    extra: dict = field(default_factory=dict)
    dtype_reason: str = field(default="requested", compare=False)

    def __post_init__(self) -> None:
        from builtin_engine.core.device_defaults import resolve_dtype
        if self.dtype == "auto":
            self.dtype, self.dtype_reason = resolve_dtype(self.dtype, self.device)
        on_cpu = self.device.startswith("cpu")
        if self.decode_prefill_budget is None:
            self.decode_prefill_budget = 8 if on_cpu else 512
        if self.decode_prefill_ratio is None:
            self.decode_prefill_ratio = 12 if on_cpu else 2
        if self.decode_prefill_budget < 0 or self.decode_prefill_ratio < 0:
            raise ValueError("decode_prefill_budget and decode_prefill_ratio must be >= 0")
        if self.quantization not in (None, "int8"):
            raise ValueError(f"unknown quantization {self.quantization!r}; choose int8")
        if self.speculative_ngram < 0 or self.num_speculative_tokens < 1:
            raise ValueError("speculative_ngram must be >= 0 and num_speculative_tokens >= 1")

    def resolved_attention_backend(self) -> str:
        return self.attention_backend or ("triton" if self.device.startswith("cuda") else "torch")

    def resolved_compile(self) -> tuple[bool, str]:
        """(compile the decode step?, why) for the startup line."""
        if self.compile is not None:
            return self.compile, "requested"
        env = os.environ.get(COMPILE_ENV, "").strip().lower()
        if env in ("0", "1", "false", "true", "off", "on"):
            return env in ("1", "true", "on"), f"{COMPILE_ENV}={env}"
        if self.device.startswith("cpu"):
            return True, "default on cpu"
        return False, f"default on {self.device} (decode graphs instead)"

    def resolved_pack_weights(self) -> tuple[bool, str]:
        """(pack the projection weights for oneDNN?, why) for the startup line."""
        if self.pack_weights is not None:
            return self.pack_weights, "requested"
        if self.device.startswith("cpu"):
            return True, "default on cpu"
        return False, f"default on {self.device}"

    def resolved_kernels(self) -> str:
        return self.kernels or ("triton" if self.device.startswith("cuda") else "torch")

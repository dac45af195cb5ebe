"""The fastest correct defaults for the device the engine runs on.

    dtype, why = resolve_dtype("auto", "cpu")   # ("float32", "CPU lacks avx512_bf16/amx_bf16")

bfloat16 halves the bytes every decode step streams from memory, but only CPUs with native
bf16 dot products (AVX512-BF16, AMX-BF16) compute it at full speed: elsewhere oneDNN converts
each tile to float32 first and a bfloat16 matmul runs several times slower than a float32 one.
CUDA keeps float32 too unless asked otherwise: it is the reference the HF comparisons use.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where the file does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> str | None:
    """The first flag that gives the CPU native bf16 dot products, or None."""
    flags = cpu_flags() if flags is None else flags
    return next((f for f in BF16_CPU_FLAGS if f in flags), None)


def resolve_dtype(name: str, device: str, flags: frozenset[str] | None = None) -> tuple[str, str]:
    """(dtype, reason): `name` unchanged unless it is "auto"."""
    if name != "auto":
        return name, "requested"
    if not device.startswith("cpu"):
        return "float32", f"default on {device}"
    flag = cpu_has_native_bf16(flags)
    if flag:
        return "bfloat16", f"auto: CPU has {flag}"
    return "float32", f"auto: CPU lacks {'/'.join(BF16_CPU_FLAGS)}"


THREADS_ENV = "INFERPLANE_THREADS"


def resolve_threads(device: str, env: str | None = None,
                    cores: int | None = None) -> tuple[int | None, str]:
    """(intra-op threads for torch, reason); None leaves torch's own setting (CUDA).

        threads, why = resolve_threads("cpu")        # (2, "auto: 2 cores") on 2 cores
        threads, why = resolve_threads("cpu", "1")   # (1, "INFERPLANE_THREADS=1")

    One thread per core this process may run on (its affinity mask, not the host's count:
    a container or taskset gets what it was given). On 2 cores, 1 thread made bfloat16
    decode steps 1.4-1.6x slower than 2, eager and compiled, at batch 1, 16 and 64 (the
    matmuls and fused loops use every core they get); more threads than cores only make
    OpenMP threads take turns on a core at every parallel region.
    """
    env = os.environ.get(THREADS_ENV, "") if env is None else env
    if env.strip():
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{THREADS_ENV}={env!r}: expected a whole number of threads >= 1")
        return value, f"{THREADS_ENV}={value}"
    if not device.startswith("cpu"):
        return None, f"default on {device}"
    cores = cores or len(os.sched_getaffinity(0))
    return cores, f"auto: {cores} cores"

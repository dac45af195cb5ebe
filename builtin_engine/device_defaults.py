"""The fastest correct defaults for the device the engine runs on.

    dtype, why = resolve_dtype("auto", "cpu")   # ("float32", "CPU lacks avx512_bf16/amx_bf16")

bfloat16 halves the bytes every decode step streams from memory, but only CPUs with native
bf16 dot products (AVX512-BF16, AMX-BF16) compute it at full speed: elsewhere oneDNN converts
each tile to float32 first and a bfloat16 matmul runs several times slower than a float32 one.
CUDA keeps float32 too unless asked otherwise: it is the reference the HF comparisons use.
"""
from __future__ import annotations

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

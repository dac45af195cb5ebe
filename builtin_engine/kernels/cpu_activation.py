"""SiLU-and-mul for bfloat16 on AVX-512 CPUs as a small C++ kernel, built once per machine.

    if cpu_silu_and_mul_serves(x):                  # CPU, bfloat16, the kernel built
        out = torch.ops.inferplane.cpu_silu_and_mul(x)   # x [T, 2I] = [gate | up] -> [T, I]

Inductor's fusion of `F.silu(gate) * up` computes each sigmoid with a full-precision vector
exp (Sleef) and a vector division, which made it compute-bound: on 2 AMX cores a 2,000-token
prompt step spent 2.5 ms a layer in it (7.5 GB/s of gate/up in, out), 9% of the step. Here
exp is a degree-6 polynomial (relative error ~2e-7) and 1 / (1 + e) a reciprocal estimate
refined by one Newton step: both far below bfloat16's rounding (2^-9), so the result is the
bfloat16 that torch rounds to but for a value within ~1e-7 of a rounding boundary (then one
unit in the last place off). SiLU is rounded to bfloat16 before the multiply, as eager torch
does, so the compiled step (which calls it) and the eager path (torch's `F.silu`) compute the
same values. Float32 keeps torch's exact maths (the HF-identical reference).
"""
from __future__ import annotations

import torch

from builtin_engine.kernels.cpu_extension import kernel_sources, load_ops

_SOURCES = kernel_sources("cpu_activation.cpp")  # in kernels/csrc/
OP = "inferplane::cpu_silu_and_mul"  # cpu_silu_and_mul(Tensor x) -> Tensor, in C++


def _fake(x):
    return x.new_empty((x.shape[0], x.shape[1] // 2))


def _extension():
    return load_ops("inferplane_cpu_activation", _SOURCES, {OP: _fake})


def cpu_silu_and_mul_available() -> bool:
    """The kernel built here, for a CPU with AVX512-BF16."""
    module = _extension()
    return module is not None and module.serves()


def cpu_silu_and_mul_serves(x: torch.Tensor) -> bool:
    """Whether `cpu_silu_and_mul` runs x: a bfloat16 CPU tensor whose last dimension is
    contiguous, and the kernel available."""
    return (x.device.type == "cpu" and x.dtype == torch.bfloat16 and x.dim() == 2
            and x.stride(-1) == 1 and cpu_silu_and_mul_available())


def cpu_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2I] = [gate | up], bfloat16 -> bfloat16(silu(gate)) * up, [T, I] (bfloat16): the
    C++ op (defined once `cpu_silu_and_mul_available()` has loaded it; traceable)."""
    return torch.ops.inferplane.cpu_silu_and_mul(x)

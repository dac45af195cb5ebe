"""SiLU-and-mul for the gated MLP: x [T, 2I] = [gate | up] -> silu(gate) * up [T, I].

The gate half comes first, matching HF Llama's act_fn(gate_proj(x)) * up_proj(x) when the
two projections are concatenated as [gate, up]. SiLU is rounded to the input dtype before
the multiply, as the unfused torch code does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from builtin_engine.kernels import jit
from builtin_engine.kernels.jit import cdiv, launch_grid, lazy_jit

tl = jit.LANGUAGE
_BLOCK = 1024


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return F.silu(x[..., :half]) * x[..., half:]


@lazy_jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * x_stride + n_cols + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    act = (g * tl.sigmoid(g)).to(gate.dtype)
    out = act.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % 2:
        raise ValueError(f"silu_and_mul needs an even last dimension, got {x.shape[-1]}")
    half = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], half), dtype=x.dtype, device=x.device)
    if x2.shape[0] == 0:
        return out.view(*x.shape[:-1], half)
    grid = (x2.shape[0], cdiv(half, _BLOCK))
    launch_grid(_silu_and_mul_kernel, grid, x2, out, x2.stride(0), out.stride(0), half,
                BLOCK=_BLOCK)
    return out.view(*x.shape[:-1], half)


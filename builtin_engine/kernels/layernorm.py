"""RMSNorm with an optional fused residual add (vLLM semantics), torch reference + Triton.

With a residual: residual = x + residual (in the input dtype, like HF's residual stream),
out = norm(residual). The statistics are taken in fp32 and the normed value is cast back to
the input dtype before the weight multiply, exactly as HF LlamaRMSNorm does.
"""

from __future__ import annotations

import torch

from builtin_engine.kernels import jit
from builtin_engine.kernels.jit import launch_grid, lazy_jit, next_power_of_2

tl = jit.LANGUAGE


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float,
                   residual: torch.Tensor | None = None):
    if residual is not None:
        x = x + residual
        residual = x
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * normed.to(x.dtype)
    return out if residual is None else (out, residual)


@lazy_jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, x_stride, res_stride,
                     out_stride, n_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0)
        x = x + r  # summed in the input dtype, as the unfused code path does
        tl.store(res_out_ptr + row * n_cols + cols, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / n_cols
    normed = (xf * tl.rsqrt(var + eps)).to(x.dtype)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    out = (w.to(tl.float32) * normed.to(tl.float32)).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * out_stride + cols, out, mask=mask)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    residual: torch.Tensor | None = None):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows, cols = x2.shape
    out_dtype = torch.promote_types(weight.dtype, x.dtype)
    out = torch.empty((rows, cols), dtype=out_dtype, device=x.device)
    res2 = residual.reshape(-1, cols).contiguous() if residual is not None else x2
    res_out = torch.empty_like(x2) if residual is not None else x2
    block = next_power_of_2(cols)
    launch_grid(_rms_norm_kernel, (rows,), x2, res2, weight, out, res_out, x2.stride(0),
                res2.stride(0), out.stride(0), cols, eps,
                HAS_RESIDUAL=residual is not None, BLOCK=block)
    out = out.view(shape)
    return out if residual is None else (out, res_out.view(shape))

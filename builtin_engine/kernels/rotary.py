"""Rotary position embedding, neox style (HF Llama's rotate_half), in place on q and k.

cos_sin_cache is [max_position, rot_dim] = [cos | sin], each half rot_dim/2 wide, indexed
by each token's position (vLLM's layout). q is [T, Hq*D] or [T, Hq, D] and k [T, Hk*D] or
[T, Hk, D]; either may be a column slice of a fused qkv tensor (row stride != width) as long
as each row's heads are contiguous. The rotation is computed in fp32 and rounded once.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels import jit
from builtin_engine.kernels.jit import launch_grid, lazy_jit, next_power_of_2

tl = jit.LANGUAGE


def build_rope_cache(head_dim: int, max_pos: int, theta: float,
                     device: torch.device | str | None = None,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[max_pos, head_dim]: cos of every (position, frequency) then sin, computed in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device=device, dtype=dtype)


def _heads_view(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.view(x.shape[0], -1, head_dim)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rotary_torch(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                 cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    head_dim = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions].float().chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    for x in (q, k):
        heads = _heads_view(x, head_dim)
        heads.copy_(_rotate(heads, cos, sin))
    return q, k


@lazy_jit
def _rotary_kernel(q_ptr, k_ptr, pos_ptr, cache_ptr, q_stride, k_stride, cache_stride,
                   num_q_heads, num_k_heads, HALF: tl.constexpr, HEADS: tl.constexpr):
    token = tl.program_id(0)
    pos = tl.load(pos_ptr + token)
    d = tl.arange(0, HALF)
    cos = tl.load(cache_ptr + pos * cache_stride + d).to(tl.float32)[None, :]
    sin = tl.load(cache_ptr + pos * cache_stride + HALF + d).to(tl.float32)[None, :]
    h = tl.arange(0, HEADS)[:, None]
    offs = h * (2 * HALF) + d[None, :]
    for which in tl.static_range(2):
        if which == 0:
            base = q_ptr + token * q_stride
            mask = h < num_q_heads
        else:
            base = k_ptr + token * k_stride
            mask = h < num_k_heads
        x1 = tl.load(base + offs, mask=mask, other=0.0)
        x2 = tl.load(base + offs + HALF, mask=mask, other=0.0)
        a = x1.to(tl.float32)
        b = x2.to(tl.float32)
        tl.store(base + offs, (a * cos - b * sin).to(x1.dtype), mask=mask)
        tl.store(base + offs + HALF, (b * cos + a * sin).to(x1.dtype), mask=mask)


def rotary_triton(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                  cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    head_dim = cos_sin_cache.shape[-1]
    if head_dim & (head_dim - 1) or cos_sin_cache.stride(-1) != 1:
        return rotary_torch(q, k, positions, cos_sin_cache)  # tl.arange needs a power of 2
    qh, kh = _heads_view(q, head_dim), _heads_view(k, head_dim)
    for x in (qh, kh):
        if x.stride(2) != 1 or x.stride(1) != head_dim:
            raise ValueError("rotary needs each token's heads contiguous (head stride = head_dim)")
    if qh.shape[0] == 0:
        return q, k
    heads = next_power_of_2(max(qh.shape[1], kh.shape[1]))
    launch_grid(_rotary_kernel, (qh.shape[0],), qh, kh, positions, cos_sin_cache,
                qh.stride(0), kh.stride(0), cos_sin_cache.stride(0), qh.shape[1], kh.shape[1],
                HALF=head_dim // 2, HEADS=heads)
    return q, k

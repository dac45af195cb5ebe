"""Plain-torch versions of the per-layer ops the model calls (vLLM semantics).

Used when no kernel registry is importable; `builtin_engine.kernels.get_ops` returns an
object with the same five methods.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.attention import paged_attention_torch, store_kv_torch


class TorchOps:
    name = "torch"

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None):
        """With a residual: residual = x + residual, out = norm(residual) -> (out, residual)."""
        if residual is not None:
            x = x + residual
            residual = x
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        out = weight * normed.to(x.dtype)
        return out if residual is None else (out, residual)

    @staticmethod
    def rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Neox-style rotation of q [T, Hq, D] and k [T, Hkv, D].

        cos_sin_cache is [max_position, D] = cat(cos, sin) over the D/2 frequencies.
        """
        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        return _rotate(q, cos, sin), _rotate(k, cos, sin)

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def store_kv(key, value, k_cache, v_cache, slot_mapping) -> None:
        store_kv_torch(key, value, k_cache, v_cache, slot_mapping)

    @staticmethod
    def paged_attention(q, k_cache, v_cache, meta, scale) -> torch.Tensor:
        return paged_attention_torch(q, k_cache, v_cache, meta, scale)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Same arithmetic as HF: x * cos + rotate_half(x) * sin, in x's dtype.
    x1, x2 = x.chunk(2, dim=-1)
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

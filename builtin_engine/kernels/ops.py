"""Kernel backends as objects: elementwise ops and attention ops, each torch or triton.

The model calls every kernel through one `KernelOps` object so that the two choices in the
engine config (kernels and attention backend) combine freely: `KernelOps(elementwise,
attention)` delegates rms_norm/rotary/silu_and_mul to the first and store_kv/paged_attention
to the second.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels.activation import silu_and_mul_torch, silu_and_mul_triton
from builtin_engine.kernels.attention import (AttentionMetadata, paged_attention_torch,
                                              store_kv_torch)
from builtin_engine.kernels.layernorm import rms_norm_torch, rms_norm_triton
from builtin_engine.kernels.rotary import build_rope_cache, rotary_torch, rotary_triton


class TorchElementwise:
    name = "torch"
    rms_norm = staticmethod(rms_norm_torch)
    rotary = staticmethod(rotary_torch)
    silu_and_mul = staticmethod(silu_and_mul_torch)


class TritonElementwise:
    name = "triton"
    rms_norm = staticmethod(rms_norm_triton)
    rotary = staticmethod(rotary_triton)
    silu_and_mul = staticmethod(silu_and_mul_triton)


class TorchAttention:
    name = "torch"
    store_kv = staticmethod(store_kv_torch)
    paged_attention = staticmethod(paged_attention_torch)


class TritonAttention:
    name = "triton"

    @staticmethod
    def store_kv(key, value, k_cache, v_cache, slot_mapping) -> None:
        from builtin_engine.kernels.kv_store import store_kv_triton
        store_kv_triton(key, value, k_cache, v_cache, slot_mapping)

    @staticmethod
    def paged_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
        from builtin_engine.kernels.triton_attention import paged_attention_triton
        return paged_attention_triton(q, k_cache, v_cache, meta, scale)


class KernelOps:
    """The object the model holds: one elementwise backend plus one attention backend."""

    def __init__(self, elementwise, attention):
        self.elementwise = elementwise
        self.attention = attention
        self.name = f"kernels={elementwise.name},attention={attention.name}"

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None):
        """out, or (out, new_residual) with new_residual = x + residual, out = norm(it)."""
        return self.elementwise.rms_norm(x, weight, eps, residual)

    def rotary(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """In place on q [T, Hq*D] or [T, Hq, D] and k likewise; returns (q, k)."""
        return self.elementwise.rotary(q, k, positions, cos_sin_cache)

    @staticmethod
    def build_rope_cache(head_dim: int, max_pos: int, theta: float,
                         device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return build_rope_cache(head_dim, max_pos, theta, device, dtype)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, 2I] laid out [gate | up] -> silu(gate) * up, [T, I]."""
        return self.elementwise.silu_and_mul(x)

    def store_kv(self, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """key/value [T, Hk, D] into caches [num_blocks, block_size, Hk, D] at slot_mapping."""
        self.attention.store_kv(key, value, k_cache, v_cache, slot_mapping)

    def paged_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Causal attention of q [T, Hq, D] over the paged context -> [T, Hq, D]."""
        return self.attention.paged_attention(q, k_cache, v_cache, meta, scale)

    def __repr__(self) -> str:
        return f"KernelOps({self.name})"

"""Scatter this step's key/value rows into the paged KV cache by slot (Triton).

The torch reference is `attention.store_kv_torch`. A negative slot means "padding, do not
store" (a CUDA-graph batch padded past its real tokens); the reference needs real slots.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels import jit
from builtin_engine.kernels.attention import store_kv_torch
from builtin_engine.kernels.jit import launch_grid, lazy_jit, next_power_of_2

tl = jit.LANGUAGE

__all__ = ["store_kv_torch", "store_kv_triton"]


@lazy_jit
def _store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                     key_stride, value_stride, cache_block_stride, cache_slot_stride,
                     block_size, row_width, BLOCK: tl.constexpr):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot >= 0:
        cols = tl.arange(0, BLOCK)
        mask = cols < row_width
        dst = (slot // block_size) * cache_block_stride + (slot % block_size) * cache_slot_stride
        k = tl.load(key_ptr + token * key_stride + cols, mask=mask)
        v = tl.load(value_ptr + token * value_stride + cols, mask=mask)
        tl.store(k_cache_ptr + dst + cols, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + dst + cols, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[T, Hk, D] (or [T, Hk*D]) as [T, Hk*D] rows without copying when possible."""
    rows = x.reshape(x.shape[0], -1)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def store_kv_triton(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    _, block_size, heads, dim = k_cache.shape
    if k_cache.stride(2) != dim or k_cache.stride(3) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError("store_kv needs caches with contiguous [heads, head_dim] per slot")
    k_rows, v_rows = _rows(key), _rows(value)
    if k_rows.shape[1] != heads * dim or v_rows.shape != k_rows.shape:
        raise ValueError(f"key/value rows {tuple(k_rows.shape)} do not match the cache "
                         f"({heads} heads x {dim})")
    if k_rows.shape[0] == 0:
        return
    launch_grid(_store_kv_kernel, (k_rows.shape[0],), k_rows, v_rows, k_cache, v_cache,
                slot_mapping, k_rows.stride(0), v_rows.stride(0), k_cache.stride(0),
                k_cache.stride(1), block_size, heads * dim, BLOCK=next_power_of_2(heads * dim))

"""Kernels: torch references and Triton versions behind one ops object.

    ops = get_ops(config.resolved_kernels(), attention=config.resolved_attention_backend())
    out, residual = ops.rms_norm(x, weight, eps, residual)
    ops.rotary(q, k, positions, cos_sin_cache)        # in place, q/k [T, H*D] or [T, H, D]
    h = ops.silu_and_mul(gate_up)                      # [T, 2I] -> [T, I]
    ops.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
    o = ops.paged_attention(q, k_cache, v_cache, meta, scale)   # q [T, Hq, D]

The elementwise kernels (rms_norm, rotary, silu_and_mul) and the attention backend
(store_kv, paged_attention) are chosen separately; `attention` defaults to the same name as
the kernels. `get_attention_ops(name)` returns just the attention backend. Triton kernels
need CUDA tensors, or CPU tensors with TRITON_INTERPRET=1 (slow; meant for tests).
"""
from __future__ import annotations

import logging

from builtin_engine.kernels.ops import (KernelOps, TorchAttention, TorchElementwise,
                                         TritonAttention, TritonElementwise)

logger = logging.getLogger(__name__)

_ELEMENTWISE = {"torch": TorchElementwise, "triton": TritonElementwise}
_ATTENTION = {"torch": TorchAttention, "triton": TritonAttention}


def _pick(table: dict, name: str, what: str):
    if name not in table:
        raise ValueError(f"unknown {what} backend {name!r}; choose one of {sorted(table)}")
    if name == "triton":
        from builtin_engine.kernels.jit import triton_available
        if not triton_available():
            raise RuntimeError(f"{what} backend 'triton' needs the triton package")
    return table[name]()


def get_attention_ops(name: str):
    """The attention backend alone: an object with store_kv and paged_attention."""
    return _pick(_ATTENTION, name, "attention")


def get_ops(name: str, attention: str | None = None) -> KernelOps:
    ops = KernelOps(_pick(_ELEMENTWISE, name, "kernels"),
                    get_attention_ops(attention or name))
    logger.info("kernel backends: %s", ops.name)
    return ops


__all__ = ["KernelOps", "get_attention_ops", "get_ops"]

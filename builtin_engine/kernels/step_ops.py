"""The compiled step's glue ops, `inferplane::store_kv` and `inferplane::packed_linear`: C++
where the extension builds, Python custom ops elsewhere, the same schema and fake either way.

    define_step_ops()                    # "C++" | "Python"; once a process, before tracing
    torch.ops.inferplane.store_kv(k, v, k_cache, v_cache, slot_mapping)   # mutates the caches
    torch.ops.inferplane.packed_linear(x, weight)   # kernels/packed_linear.py's `linear`

Why C++: each layer of a decode step calls these five times (four projections, one store),
and a Python custom op costs ~15 us a call more than the work it hands on (the dispatcher
enters Python, which calls back into ATen): ~3 ms of a batch-1 step of a 30-layer model.
Defined in C++ (csrc/step_ops.cpp, TORCH_LIBRARY) the call stays in the dispatcher. The
packed copies live in kernels/packed_linear.py's table, which mirrors each entry into the
C++ one (`packed_linear.attach_native_table`). Where no compiler works (or INFERPLANE_CPU_ATTENTION=0) the
same ops are defined as Python custom ops, as they were before.

The C++ store_kv copies each row straight to its slot (one memcpy a row, every slot checked
first) when the rows are already in the cache's dtype and each row is one contiguous run,
as K after rotary and V sliced out of the fused QKV output are; other rows take ATen's
index_copy_. On 2 AMX cores, a 64-row decode step: 82 -> 25 us a call with index_copy_'s
TensorIterator gone, ~2 ms of a step over 30 layers.
"""
from __future__ import annotations

import functools

import torch

from builtin_engine.kernels import packed_linear
from builtin_engine.kernels.cpu_extension import kernel_sources, load_extension

_SOURCES = kernel_sources("step_ops.cpp")  # in kernels/csrc/


@functools.cache
def define_step_ops() -> str:
    """Define both ops, in C++ where the extension builds ("C++"), else in Python
    ("Python"); their fakes either way. Idempotent (an op is defined once a process)."""
    module = load_extension("inferplane_step_ops", _SOURCES)
    if module is None:
        _define_in_python()
    torch.library.register_fake("inferplane::store_kv")(_store_kv_fake)
    torch.library.register_fake("inferplane::packed_linear")(_packed_linear_fake)
    packed_linear.attach_native_table(module)
    return "C++" if module is not None else "Python"


def _store_kv_fake(key, value, k_cache, v_cache, slot_mapping) -> None:
    return None


def _packed_linear_fake(x, weight):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _define_in_python() -> None:
    @torch.library.custom_op("inferplane::store_kv", mutates_args=("k_cache", "v_cache"))
    def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        _, _, heads, dim = k_cache.shape
        k_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
        v_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, value.to(v_cache.dtype))

    @torch.library.custom_op("inferplane::packed_linear", mutates_args=())
    def packed_linear_op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return packed_linear.linear(x.contiguous(), weight)

"""Deferred Triton import and compilation.

Kernel modules decorate their kernels with `lazy_jit` instead of `triton.jit` and write
`tl = jit.LANGUAGE` with `from __future__ import annotations` (so `tl.constexpr`
annotations stay strings). Importing a kernel module therefore never imports triton: the
torch references that live beside the kernels stay usable on machines without triton, and
the Triton interpreter (TRITON_INTERPRET=1, needed for CPU tensors) can still be chosen at
the first launch. Triton reads that variable once, when `triton` is first imported, so:
- first launch on CPU tensors with triton not yet imported: TRITON_INTERPRET=1 is set here;
- CPU tensors but triton already imported in compiled mode: a clear error, never a crash
  deep inside the interpreter.
At the first launch the module global `tl` of the kernel's module is bound to
`triton.language`, which is what both the compiler and the interpreter resolve.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import torch

LANGUAGE = None  # placeholder for `tl` until the first launch binds triton.language


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def _import_triton(device: torch.device):
    if not triton_available():
        raise RuntimeError("the triton kernels need the 'triton' package; use the torch kernels")
    if device.type == "cpu" and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    if device.type == "cpu" and not interpreter_active():
        raise RuntimeError("triton kernels on CPU tensors need TRITON_INTERPRET=1 set before "
                           "triton is first imported")
    if device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"triton kernels run on CUDA (or CPU through the interpreter), "
                           f"not on {device.type}")
    return triton


def interpreter_active() -> bool:
    """True when triton was imported in interpreter mode (its own jit functions interpret)."""
    if "triton" not in sys.modules:
        return os.environ.get("TRITON_INTERPRET") == "1"
    import triton.language as language
    return type(language.standard.sum).__name__ == "InterpretedFunction"


class LazyKernel:
    """A kernel function handed to triton.jit on its first launch."""

    def __init__(self, fn):
        self.fn = fn
        self._kernel = None

    def resolve(self, device: torch.device):
        if self._kernel is None:
            triton = _import_triton(device)
            self.fn.__globals__["tl"] = triton.language
            self._kernel = triton.jit(self.fn)
        elif device.type == "cpu" and not interpreter_active():
            raise RuntimeError("triton kernels on CPU tensors need TRITON_INTERPRET=1")
        return self._kernel


def lazy_jit(fn) -> LazyKernel:
    return LazyKernel(fn)


def launch_grid(kernel: LazyKernel, grid: tuple, *args, **kwargs) -> None:
    """Launch `kernel` over `grid`; the device comes from the first tensor argument."""
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    kernel.resolve(device)[grid](*args, **kwargs)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)

"""Builds and caches the engine's small C++ CPU kernels, once per machine.

    module = load_extension("inferplane_cpu_decode_attention",
                            kernel_sources("cpu_decode_attention.cpp"))
    if module is not None:                    # None: no compiler, or switched off
        out = torch.ops.inferplane.cpu_decode_attention(...)   # loading registered it
    load_ops("inferplane_cpu_decode_attention", sources,
             {"inferplane::cpu_decode_attention": fake})      # the same, fakes registered

The kernels' C++ lives in kernels/csrc/: one .cpp a kernel, which ends by registering its op
with torch's dispatcher (TORCH_LIBRARY_FRAGMENT(inferplane): schema and CPU kernel, so a call
is dispatcher -> C++ with no Python in between; a Python custom op cost ~10 us a call more)
and a pybind11 module for the helpers Python asks (what the build serves), and the headers
they share (avx512_helpers.h, prompt_runs.h). The fake (meta) implementations that
torch.compile traces with are registered from Python once the library is loaded (`load_ops`). The build uses the
C++ compiler inductor uses (`-O3 -march=native -ffast-math -fopenmp`; about 40 s a kernel)
into `~/.cache/inferplane/extensions` (INFERPLANE_EXTENSIONS_DIR overrides it). The module
name hashes the sources and the headers beside them, the torch version and the CPU's flags,
so a cache directory shared between machines never loads code built for another CPU, and an
edited kernel is rebuilt. `INFERPLANE_CPU_ATTENTION=0` switches every kernel off: the traced
and SDPA paths serve instead, as they do wherever no compiler works.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

DISABLE_ENV = "INFERPLANE_CPU_ATTENTION"  # "0" keeps the traced / SDPA attention
CSRC = Path(__file__).with_name("csrc")  # the kernels' C++ sources and shared headers


def kernel_sources(*names: str) -> tuple[str, ...]:
    """The paths of kernels/csrc files, as load_extension takes them."""
    return tuple(str(CSRC / name) for name in names)


def _build_dir() -> str:
    # Not under the data directory: one build per machine serves every engine (and test).
    return os.environ.get("INFERPLANE_EXTENSIONS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "inferplane", "extensions")


def _inputs(sources: tuple[str, ...]) -> list[Path]:
    """The sources and every header beside them: what a build reads."""
    dirs = sorted({Path(s).parent for s in sources})
    return [Path(s) for s in sources] + [h for d in dirs for h in sorted(d.glob("*.h"))]


def _module_name(prefix: str, sources: tuple[str, ...]) -> str:
    from builtin_engine.core.device_defaults import cpu_flags
    text = "".join(path.read_text() for path in _inputs(sources))
    key = text + torch.__version__ + " ".join(sorted(cpu_flags()))
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@functools.cache
def load_extension(prefix: str, sources: tuple[str, ...]):
    """The built module, or None (no compiler, or switched off); built at most once a process
    (cached on the arguments, so `sources` is a tuple of paths: kernel_sources(...))."""
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return None
    from torch.utils.cpp_extension import load
    started = time.monotonic()
    try:
        name = _module_name(prefix, sources)
        directory = os.path.join(_build_dir(), name)
        os.makedirs(directory, exist_ok=True)
        module = load(
            name=name, sources=list(sources),
            extra_include_paths=sorted({os.path.dirname(s) for s in sources}),
            extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
            extra_ldflags=["-fopenmp"], build_directory=directory, verbose=False)
    except Exception as exc:  # no compiler, headers missing: the torch paths serve
        logger.warning("CPU kernel %s unavailable (%s); using the torch path", prefix,
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    logger.info("CPU kernel %s ready in %.1fs (%s)", prefix, time.monotonic() - started,
                directory)
    return module


@functools.cache
def _registered(prefix: str, sources: tuple[str, ...], op: str, fake) -> None:
    torch.library.register_fake(op)(fake)


def load_ops(prefix: str, sources: tuple[str, ...], fakes: dict):
    """`load_extension`, then each op's fake implementation ({"inferplane::name": fn})
    registered once: the ops exist from here on, or the result is None."""
    module = load_extension(prefix, sources)
    if module is not None:
        for op, fake in fakes.items():
            _registered(prefix, sources, op, fake)
    return module

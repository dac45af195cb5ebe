"""Builds and caches the engine's small C++ CPU kernels, once per machine.

    module = load_extension("inferplane_cpu_decode_attention", SOURCE, ["decode_attention"])
    if module is not None:                    # None: no compiler, or switched off
        out = module.decode_attention(...)

The build uses the C++ compiler inductor uses (`-O3 -march=native -ffast-math -fopenmp`;
about 40 s a kernel) into `~/.cache/inferplane/extensions` (INFERPLANE_EXTENSIONS_DIR
overrides it). The module name hashes the source, the torch version and the CPU's flags, so a
cache directory shared between machines never loads code built for another CPU, and an edited
kernel is rebuilt. `INFERPLANE_CPU_ATTENTION=0` switches every kernel off: the traced and SDPA
paths serve instead, as they do wherever no compiler works.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import time

import torch

logger = logging.getLogger(__name__)

DISABLE_ENV = "INFERPLANE_CPU_ATTENTION"  # "0" keeps the traced / SDPA attention


def _build_dir() -> str:
    # Not under the data directory: one build per machine serves every engine (and test).
    return os.environ.get("INFERPLANE_EXTENSIONS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "inferplane", "extensions")


def _module_name(prefix: str, source: str) -> str:
    from ..device_defaults import cpu_flags
    key = source + torch.__version__ + " ".join(sorted(cpu_flags()))
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@functools.cache
def load_extension(prefix: str, source: str, functions: tuple[str, ...] | list[str]):
    """The built module, or None (no compiler, or switched off); built at most once a process."""
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return None
    from torch.utils.cpp_extension import load_inline
    name = _module_name(prefix, source)
    directory = os.path.join(_build_dir(), name)
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    try:
        module = load_inline(
            name=name, cpp_sources=source, functions=list(functions),
            extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
            extra_ldflags=["-fopenmp"], build_directory=directory, verbose=False)
    except Exception as exc:  # no compiler, headers missing: the torch paths serve
        logger.warning("CPU kernel %s unavailable (%s); using the torch path", prefix,
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    logger.info("CPU kernel %s ready in %.1fs (%s)", prefix, time.monotonic() - started,
                directory)
    return module

"""One OpenMP team per serving process: the engine thread's.

    release_openmp_pool()        # in the server's main thread, once the engine thread owns steps

torch's CPU kernels (aten, oneDNN, inductor's generated loops, the engine's C++ attention)
run their parallel regions on GNU OpenMP (libgomp). libgomp keeps one pool of worker threads
per thread that has opened a parallel region, and once the process holds more OpenMP threads
than CPUs it stops spinning between regions (its "throttled" spin count of 100): every region
then wakes its workers through a futex. A server loads the model (and warms it up) in its main
thread, so that thread keeps a pool; the engine thread that runs the steps opens a second one,
and on 2 cores that is 4 OpenMP threads for 2 CPUs. Measured on 2 AMX cores: a batch-8 decode
step took 64.7 ms on the engine thread against 34.1 ms on the main thread, every op about 2x
slower (a packed bf16 matmul 152 us against 60 us), and the served engine_peers workload made
298 tok/s against 420 tok/s when the same steps ran on the main thread.

`release_openmp_pool` ends the calling thread's pool (`omp_pause_resource_all`, OpenMP 5.0) and
gives that thread a team of one from then on (`omp_set_num_threads(1)`, a per-thread setting),
so the engine thread's team is the only one and spins as it should. The calling thread can still
run torch ops, single-threaded. Where libgomp is not loaded (another OpenMP runtime, or none),
nothing happens and False is returned.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os

logger = logging.getLogger(__name__)
OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: release the threads, keep the runtime's state


@functools.cache
def _libgomp() -> ctypes.CDLL | None:
    """The libgomp torch runs on, or None. Other wheels bring their own copies (sentencepiece
    does): only torch's pools are the ones that matter, so its copy is taken first."""
    import torch
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line.split()[-1]}
    except OSError:
        return None
    torch_dir = os.path.dirname(torch.__file__)
    for path in sorted(paths, key=lambda p: not p.startswith(torch_dir)):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "omp_pause_resource_all") and hasattr(lib, "omp_set_num_threads"):
            return lib
    return None


def release_openmp_pool() -> bool:
    """End the calling thread's OpenMP worker pool and keep it from opening another; True if
    done. Call it from a thread that no longer runs the model (see the module docstring)."""
    lib = _libgomp()
    if lib is None:
        return False
    if lib.omp_pause_resource_all(OMP_PAUSE_SOFT) != 0:
        logger.debug("omp_pause_resource_all refused (inside a parallel region?)")
        return False
    lib.omp_set_num_threads(1)
    return True

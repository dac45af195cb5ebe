"""openmp_pool: the server's main thread gives up its OpenMP pool to the engine thread.

Each case runs in a fresh interpreter: libgomp's pools live as long as the process does."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_release_ends_the_main_threads_worker_pool():
    out = _run("""
        import os, threading, torch
        from builtin_engine.runner.openmp_pool import release_openmp_pool, _libgomp
        tasks = lambda: len(os.listdir(f"/proc/{os.getpid()}/task"))
        torch.set_num_threads(2)
        torch.ones(1 << 22).add_(1)          # a parallel region: the main thread's pool
        before = tasks()
        released = release_openmp_pool()
        after = tasks()
        torch.ones(1 << 22).add_(1)          # still runs, as a team of one: no new pool
        again = tasks()
        seen = []
        def engine():                        # the engine thread keeps its own thread count
            torch.set_num_threads(2)
            seen.append(torch.get_num_threads())
        t = threading.Thread(target=engine); t.start(); t.join()
        print(released, before - after, again == after, torch.get_num_threads(), seen[0],
              "torch/lib" in _libgomp()._name)
    """)
    assert out == "True 1 True 1 2 True"


def test_the_libgomp_found_is_torchs_even_when_another_wheel_loads_its_own():
    # sentencepiece ships a libgomp of its own; pausing that one would change nothing
    pytest.importorskip("sentencepiece")
    out = _run("""
        import sentencepiece, torch
        from builtin_engine.runner.openmp_pool import _libgomp
        import os
        print(os.path.dirname(_libgomp()._name) == os.path.join(os.path.dirname(torch.__file__), "lib"))
    """)
    assert out == "True"


def test_the_engine_thread_takes_the_runners_thread_count():
    import asyncio
    import threading

    from builtin_engine.core.engine import AsyncEngine
    from builtin_engine.core.simulator import SimulatedExecutor
    from tests.builtin_engine.core.conftest import sim_config

    config = sim_config()
    executor = SimulatedExecutor(config)
    entered = []
    executor.enter_step_thread = lambda: entered.append(threading.current_thread().name)
    engine = AsyncEngine(config, executor)
    engine.start()
    asyncio.run(engine.shutdown(0.0))
    assert entered == ["engine-loop"]

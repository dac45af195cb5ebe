"""Deferred triton import: kernel modules import without triton; CPU launches are explained."""
import os
import subprocess
import sys

from tests.conftest import ROOT

SNIPPET = """
import sys, torch
from builtin_engine.kernels import get_ops
ops = get_ops('torch')
ops.rms_norm(torch.ones(2, 8), torch.ones(8), 1e-5)
assert 'triton' not in sys.modules, 'torch kernels imported triton'
{extra}
"""


def _run(extra: str, env_interpret: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if env_interpret is not None:
        env["TRITON_INTERPRET"] = env_interpret
    return subprocess.run([sys.executable, "-c", SNIPPET.format(extra=extra)], env=env,
                          capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_torch_ops_do_not_import_triton_and_first_cpu_launch_interprets():
    extra = ("x = get_ops('triton').silu_and_mul(torch.ones(2, 8))\n"
             "assert x.shape == (2, 4)\nprint('ok')")
    result = _run(extra, None)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_cpu_launch_after_compiled_triton_import_is_a_clear_error():
    extra = ("import triton\n"
             "try:\n    get_ops('triton').silu_and_mul(torch.ones(2, 8))\n"
             "except RuntimeError as e:\n    print('error:', e)\n")
    result = _run(extra, "0")
    assert result.returncode == 0, result.stderr
    assert "error: triton kernels on CPU tensors need TRITON_INTERPRET=1" in result.stdout

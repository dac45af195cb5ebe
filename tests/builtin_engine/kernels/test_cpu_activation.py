"""The C++ bfloat16 SiLU-and-mul against torch's eager maths: the same bfloat16 results over
normal, large, tiny and zero inputs, widths that are no multiple of 16, rows read through a
stride (a slice of a wider tensor); inside the compiled step it is what a bfloat16 CPU model
runs; other dtypes and shapes are refused with a message."""
import pytest
import torch

from builtin_engine.core.device_defaults import cpu_flags
from builtin_engine.kernels.activation import silu_and_mul_torch
from builtin_engine.kernels.cpu_activation import (cpu_silu_and_mul, cpu_silu_and_mul_available,
                                                   cpu_silu_and_mul_serves)

HAS_BF16 = "avx512_bf16" in cpu_flags()
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="the kernel is for CPUs with AVX512-BF16")


def test_available_exactly_where_the_cpu_has_avx512_bf16():
    assert cpu_silu_and_mul_available() == HAS_BF16


def _inputs(rows: int, width: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g) * 4
    x[0, : min(8, width)] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 90.0, -90.0, 1e4, -1e4])[
        : min(8, width)]
    return x.to(torch.bfloat16)


@needs_bf16
@pytest.mark.parametrize("rows,half", [(1, 16), (7, 1536), (64, 1536), (300, 40), (3, 5)])
def test_same_bfloat16_values_as_torch(rows, half):
    x = _inputs(rows, 2 * half)
    expected = silu_and_mul_torch(x)
    out = cpu_silu_and_mul(x)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, half)
    assert torch.isfinite(out.float()).all()
    # One unit in the last place where a value lies within ~1e-7 of a rounding boundary;
    # below 1e-30 torch's sigmoid underflows to 0 where the kernel's stops at e^-87.
    differing = ((out != expected) & (expected.float().abs() > 1e-30)).sum().item()
    assert differing <= max(1, out.numel() // 10_000), differing
    torch.testing.assert_close(out.float(), expected.float(), rtol=8e-3, atol=1e-30)


@needs_bf16
def test_rows_read_through_a_stride():
    wide = _inputs(33, 3 * 96, seed=1)
    x = wide[:, : 2 * 96]  # row stride 288, last dimension contiguous
    assert not x.is_contiguous() and cpu_silu_and_mul_serves(x)
    torch.testing.assert_close(cpu_silu_and_mul(x).float(), silu_and_mul_torch(x).float(),
                               rtol=8e-3, atol=1e-30)


@needs_bf16
def test_no_rows_gives_no_rows():
    assert cpu_silu_and_mul(torch.empty(0, 64, dtype=torch.bfloat16)).shape == (0, 32)


def test_serves_only_bfloat16_cpu_matrices():
    assert not cpu_silu_and_mul_serves(torch.zeros(4, 32))
    assert not cpu_silu_and_mul_serves(torch.zeros(2, 4, 32, dtype=torch.bfloat16))
    assert not cpu_silu_and_mul_serves(torch.zeros(32, 4, dtype=torch.bfloat16).t())


@needs_bf16
@pytest.mark.parametrize("bad,message", [
    (torch.zeros(4, 32), "bfloat16 only"),
    (torch.zeros(4, 33, dtype=torch.bfloat16), "x \\[T, 2I\\]"),
    (torch.zeros(2, 4, 32, dtype=torch.bfloat16), "x \\[T, 2I\\]"),
])
def test_bad_inputs_are_refused(bad, message):
    with pytest.raises(RuntimeError, match=message):
        cpu_silu_and_mul(bad)


@needs_bf16
def test_inside_a_compiled_graph_it_matches_eager():
    compiled = torch.compile(lambda x: cpu_silu_and_mul(x * 2), fullgraph=True)
    x = _inputs(24, 2 * 64, seed=2)
    torch.testing.assert_close(compiled(x), cpu_silu_and_mul(x * 2), rtol=0, atol=0)

"""oneDNN-packed projection weights: the same products as F.linear up to float rounding, for
every row count (packed for one batch size, called with others), eager and inside a compiled
graph; the real model packs its projections and LM head on CPU and its greedy text is the
unpacked model's."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from builtin_engine.core.config import EngineConfig
from builtin_engine.kernels import packed_linear as pl
from builtin_engine.kernels.step_ops import define_step_ops
from builtin_engine.loader import load_model

pytestmark = pytest.mark.skipif(not pl.packing_available(), reason="torch built without oneDNN")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 5e-2)])
@pytest.mark.parametrize("rows", [1, 2, 17, 64, 300])
def test_packed_matches_f_linear_for_any_row_count(dtype, tol, rows):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(384, 192, generator=gen).to(dtype)
    x = torch.randn(rows, 192, generator=gen).to(dtype)
    if not pl.pack_weight(weight, batch_hint=64):
        # oneDNN packs bfloat16 only on CPUs with AVX512 or AVX-NE-CONVERT: F.linear it is.
        assert dtype == torch.bfloat16 and not pl.is_packed(weight)
        assert torch.equal(pl.linear(x, weight), F.linear(x, weight))
        return
    try:
        assert pl.is_packed(weight)
        got, want = pl.linear(x, weight).float(), F.linear(x, weight).float()
        assert got.shape == (rows, 384)
        assert (got - want).abs().max().item() <= tol * want.abs().max().item()
    finally:
        pl.unpack_weight(weight)
    assert not pl.is_packed(weight)


def test_a_freed_weight_takes_its_packed_copy_with_it():
    import gc
    weight = torch.randn(64, 32)
    key = weight.data_ptr()
    assert pl.pack_weight(weight, batch_hint=8)
    del weight
    gc.collect()
    assert key not in pl._PACKED  # a new tensor at that address must not find it


def test_unpackable_weights_are_left_to_f_linear():
    weight = torch.randn(8, 4)
    assert not pl.pack_weight(weight.t(), batch_hint=4)  # not contiguous
    assert not pl.pack_weight(weight.half(), batch_hint=4)  # no packed float16 path here
    x = torch.randn(3, 4)
    assert torch.equal(pl.linear(x, weight), F.linear(x, weight))


def test_the_op_inside_a_compiled_graph_uses_the_packed_copy():
    define_step_ops()  # the op (C++ where a compiler works)
    weight = torch.randn(256, 128)
    pl.pack_weight(weight, batch_hint=8)
    try:
        def f(x, w):
            return torch.ops.inferplane.packed_linear(x * 2.0, w).relu()

        compiled = torch.compile(f, fullgraph=True, dynamic=True)
        with torch.inference_mode():
            for rows in (3, 5, 40):
                x = torch.randn(rows, 128)
                want = F.linear(x * 2.0, weight).relu()
                torch.testing.assert_close(compiled(x, weight), want, rtol=1e-4, atol=1e-4)
        # A packed copy that differs from the weight shows the graph really reads it.
        pl.remember(weight.data_ptr(), torch.ops.mkldnn._reorder_linear_weight(
            torch.zeros_like(weight), 8))
        with torch.inference_mode():
            assert compiled(torch.randn(7, 128), weight).abs().max().item() == 0.0
    finally:
        pl.unpack_weight(weight)


@pytest.fixture
def restored_cap():
    rows, why = pl.row_cap()
    yield
    pl.set_row_cap(rows, why)


def _zero_packed(weight):
    """A packed copy of zeros in the weight's slot: a zero output shows linear read it."""
    pl.remember(weight.data_ptr(), torch.ops.mkldnn._reorder_linear_weight(
        torch.zeros_like(weight), 8))


def test_rows_past_the_cap_take_f_linear_and_within_it_the_packed_copy(restored_cap):
    weight = torch.randn(64, 32)
    _zero_packed(weight)
    try:
        x = torch.randn(800, 32)
        pl.set_row_cap(512, "test")
        assert torch.equal(pl.linear(x, weight), F.linear(x, weight))
        pl.set_row_cap(1024, "test")
        assert pl.linear(x, weight).abs().max().item() == 0.0
    finally:
        pl.unpack_weight(weight)


def test_calibration_takes_the_faster_side_at_the_step_size(restored_cap):
    import re
    weight = torch.randn(768, 256)
    assert pl.pack_weight(weight, batch_hint=64)
    try:
        pl.set_row_cap(pl.PACKED_MAX_ROWS, "default")
        assert pl.calibrate_row_cap(weight, 256)[0] == pl.PACKED_MAX_ROWS  # within the default
        rows, why = pl.calibrate_row_cap(weight, 1024)
        packed, dense = (float(v) for v in re.search(r"packed ([\d.]+) ms, unpacked ([\d.]+) ms",
                                                      why).groups())
        assert rows == (1024 if packed < dense else pl.PACKED_MAX_ROWS) or packed == dense
        assert pl.row_cap() == (rows, why)
        x = torch.randn(1000, 256)
        torch.testing.assert_close(pl.linear(x, weight), F.linear(x, weight), rtol=1e-4,
                                   atol=1e-4)
    finally:
        pl.unpack_weight(weight)
    unpacked = torch.randn(64, 32)
    assert pl.calibrate_row_cap(unpacked, 4096) == pl.row_cap()  # no packed copy: unchanged


def test_a_quantized_weight_leaves_the_cap_as_it_is(restored_cap):
    from builtin_engine.models.quantization import Int8Weight
    before = pl.row_cap()
    assert pl.calibrate_row_cap(Int8Weight.quantize(torch.randn(64, 32)), 4096) == before


def _runner(pack: bool):
    from builtin_engine.runner.model_runner import ModelRunner
    cfg = EngineConfig(model="smollm2-135m-instruct", dtype="float32", pack_weights=pack,
                       num_blocks=64, swap_space_gib=0.0, compile=False)
    loaded = load_model(cfg)
    return loaded, ModelRunner(cfg, loaded)


@pytest.mark.slow
def test_the_real_model_packs_on_cpu_and_keeps_its_greedy_text():
    from tests.builtin_engine.model.driver import generate

    packed, packed_runner = _runner(True)
    plain, plain_runner = _runner(False)
    layer = packed.model.layers[0]
    assert all(pl.is_packed(getattr(layer, n))
               for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
    assert pl.is_packed(packed.model.lm_head)
    assert not pl.is_packed(plain.model.layers[0].qkv_proj)
    ids = packed.tokenizer.encode("The capital of France is")
    assert generate(packed_runner, ids, 24) == generate(plain_runner, ids, 24)


def test_the_operator_can_fix_the_cap(restored_cap, monkeypatch):
    weight = torch.randn(64, 32)
    monkeypatch.setenv(pl.ROWS_ENV, "100")
    assert pl.calibrate_row_cap(weight, 4096) == (100, f"up to 100 rows ({pl.ROWS_ENV})")
    monkeypatch.setenv(pl.ROWS_ENV, "many")
    with pytest.raises(ValueError, match="whole number"):
        pl.calibrate_row_cap(weight, 4096)

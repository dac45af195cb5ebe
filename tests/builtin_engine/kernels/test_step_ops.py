"""The compiled step's glue ops in C++: store_kv writes K/V rows at their slots (casting to the
cache's dtype), packed_linear takes the packed copy kernels/packed_linear.py registered and
F.linear otherwise (a forgotten copy, a row count over the cap, another dtype); the C++ ops
trace under torch.compile and FakeTensorMode through their fakes."""
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from builtin_engine.kernels import packed_linear as pl
from builtin_engine.kernels.cpu_decode_attention import cpu_decode_attention_available
from builtin_engine.kernels.step_ops import define_step_ops
from tests.builtin_engine.kernels.paged_case import make_case


@pytest.fixture(autouse=True, scope="module")
def _defined():
    assert define_step_ops() == "C++"  # a compiler is part of the set-up
    assert cpu_decode_attention_available()


# Rows in the cache's dtype with int32 or int64 slots take the direct copy; float32 rows into
# a bfloat16 cache are cast first (ATen's index_copy_).
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("slots_dtype", [torch.int64, torch.int32])
def test_store_kv_writes_each_row_at_its_slot(cache_dtype, rows_dtype, slots_dtype):
    k_cache = torch.zeros(4, 16, 2, 8, dtype=cache_dtype)
    v_cache = torch.zeros_like(k_cache)
    key, value = torch.randn(3, 2, 8, dtype=rows_dtype), torch.randn(3, 2, 8, dtype=rows_dtype)
    slots = torch.tensor([5, 17, 63], dtype=slots_dtype)
    torch.ops.inferplane.store_kv(key, value, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, 2, 8), v_cache.view(-1, 2, 8)
    assert torch.equal(flat_k[slots], key.to(cache_dtype))
    assert torch.equal(flat_v[slots], value.to(cache_dtype))
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[slots] = False
    assert flat_k[untouched].abs().sum() == 0 and flat_v[untouched].abs().sum() == 0


@pytest.mark.parametrize("bad_slot", [64, -1])
def test_store_kv_refuses_a_slot_outside_the_cache(bad_slot):
    k_cache = torch.zeros(4, 16, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    rows = torch.randn(2, 2, 8)
    with pytest.raises(RuntimeError, match="outside the KV cache"):
        torch.ops.inferplane.store_kv(rows, rows, k_cache, v_cache, torch.tensor([3, bad_slot]))
    assert k_cache.abs().sum() == 0   # checked before any row is written


@pytest.mark.parametrize("layout", ["slice of fused rows", "strided elements"])
def test_store_kv_takes_rows_that_are_views_of_a_wider_tensor(layout):
    k_cache = torch.zeros(4, 16, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    if layout == "slice of fused rows":   # as V out of a fused QKV projection: rows apart
        kv = torch.randn(3, 32)
        key, value = kv[:, :16].view(3, 2, 8), kv[:, 16:].view(3, 2, 8)
    else:                                 # no row one contiguous run: the index_copy_ route
        kv = torch.randn(3, 2, 16)
        key, value = kv[..., ::2], kv[..., 1::2]
    slots = torch.tensor([1, 2, 40])
    torch.ops.inferplane.store_kv(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache.view(-1, 2, 8)[slots], key)
    assert torch.equal(v_cache.view(-1, 2, 8)[slots], value)
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[slots] = False
    assert k_cache.view(-1, 2, 8)[untouched].abs().sum() == 0


@pytest.mark.skipif(not pl.packing_available(), reason="torch built without oneDNN")
def test_packed_linear_reads_the_registered_copy_until_it_is_forgotten():
    weight = torch.randn(96, 64)
    x = torch.randn(5, 64)
    want = F.linear(x, weight)
    assert pl.pack_weight(weight, batch_hint=8)
    try:
        torch.testing.assert_close(torch.ops.inferplane.packed_linear(x, weight), want,
                                   rtol=1e-4, atol=1e-4)
        # A packed copy of zeros shows which one the C++ op reads.
        pl.remember(weight.data_ptr(), torch.ops.mkldnn._reorder_linear_weight(
            torch.zeros_like(weight), 8))
        assert torch.ops.inferplane.packed_linear(x, weight).abs().max().item() == 0.0
        cap, why = pl.row_cap()
        pl.set_row_cap(4, "test")  # 5 rows: over the cap, so F.linear
        try:
            torch.testing.assert_close(torch.ops.inferplane.packed_linear(x, weight), want)
        finally:
            pl.set_row_cap(cap, why)
        # another dtype than the weight's: F.linear's error, not a read of the packed copy
        with pytest.raises(RuntimeError):
            torch.ops.inferplane.packed_linear(x.double(), weight)
    finally:
        pl.unpack_weight(weight)
    torch.testing.assert_close(torch.ops.inferplane.packed_linear(x, weight), want)


def _tiles_ready() -> bool:
    return pl._native["table"].tiles_ready()


def test_a_tile_copy_holds_each_column_block_as_pairs_of_the_weight():
    weight = torch.arange(64 * 6, dtype=torch.float32).view(64, 6).bfloat16()
    tiles = pl.tile_copy(weight).view(2, 3, pl.TILE_COLUMNS, 2)  # [block][pair][column][2]
    for block, pair, column in ((0, 0, 0), (1, 2, 31), (1, 1, 5)):
        row = weight[block * pl.TILE_COLUMNS + column]
        assert torch.equal(tiles[block, pair, column], row[2 * pair:2 * pair + 2])
    assert pl.tile_copy(torch.zeros(48, 6, dtype=torch.bfloat16)) is None  # 48 % 32
    assert pl.tile_copy(torch.zeros(64, 5, dtype=torch.bfloat16)) is None  # odd depth
    assert pl.tile_copy(torch.zeros(64, 6)) is None  # float32: oneDNN's copy serves


# On a CPU with AMX tiles a bfloat16 projection of up to 64 rows (32 for a weight wider than
# 8192 columns) takes the tile copy; other row counts, and CPUs without tiles, oneDNN's copy.
# A oneDNN copy of zeros registered over the real one shows which copy a call read.
@pytest.mark.skipif(not pl.packing_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("columns, rows, tile_rows", [(96, 1, True), (96, 7, True),
                                                      (96, 64, True), (96, 65, False),
                                                      (8224, 32, True), (8224, 33, False)])
def test_few_bfloat16_rows_take_the_tile_copy_where_the_cpu_has_tiles(columns, rows, tile_rows):
    weight = torch.randn(columns, 64).bfloat16()
    x = torch.randn(rows, 64).bfloat16()
    want = F.linear(x.float(), weight.float())
    assert pl.pack_weight(weight, batch_hint=8)
    try:
        got = torch.ops.inferplane.packed_linear(x, weight)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, columns)
        torch.testing.assert_close(got.float(), want, rtol=1.6e-2, atol=2e-2)
        pl.remember(weight.data_ptr(), torch.ops.mkldnn._reorder_linear_weight(
            torch.zeros_like(weight), 8))
        read_tiles = torch.ops.inferplane.packed_linear(x, weight).abs().max().item() > 0
        assert read_tiles == (tile_rows and _tiles_ready())
    finally:
        pl.unpack_weight(weight)


def test_a_forgotten_weight_leaves_no_tile_copy_behind():
    weight = torch.randn(64, 64).bfloat16()
    x = torch.randn(3, 64).bfloat16()
    assert pl.pack_weight(weight, batch_hint=8)
    pl.unpack_weight(weight)
    with torch.no_grad():
        weight.zero_()  # a tile copy left in the table would still give the old products
    assert torch.ops.inferplane.packed_linear(x, weight).abs().max().item() == 0.0


def test_the_ops_fakes_give_the_shapes_under_fake_tensor_mode():
    with FakeTensorMode():
        q = torch.empty(3, 9, 64)
        caches = torch.empty(8, 16, 3, 64)
        out = torch.ops.inferplane.cpu_decode_attention(
            q, caches, caches, torch.empty(3, 2, dtype=torch.int32),
            torch.empty(3, dtype=torch.int32), 0.1)
        assert out.shape == (3, 9, 64) and out.dtype == torch.float32
        y = torch.ops.inferplane.packed_linear(torch.empty(5, 64), torch.empty(96, 64))
        assert y.shape == (5, 96)
        assert torch.ops.inferplane.store_kv(torch.empty(3, 3, 64), torch.empty(3, 3, 64),
                                             caches, caches,
                                             torch.empty(3, dtype=torch.int64)) is None


def test_a_compiled_graph_calls_the_cpp_ops():
    case = make_case([5, 40, 70], [1, 1, 1], 16, 9, 3, 64, dtype=torch.float32)
    weight = torch.randn(64, 64)
    m = case.meta

    def step(q, key, k_cache, v_cache, slots, tables, lens):
        torch.ops.inferplane.store_kv(key, key, k_cache, v_cache, slots)
        out = torch.ops.inferplane.cpu_decode_attention(q, k_cache, v_cache, tables, lens, 0.125)
        return torch.ops.inferplane.packed_linear(out.reshape(-1, 64), weight)

    key = torch.randn(3, 3, 64)
    slots = torch.tensor([100, 101, 102])
    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        k2, v2 = case.k_cache.clone(), case.v_cache.clone()
        got = compiled(case.q, key, k2, v2, slots, m.block_tables, m.seq_lens)
        k1, v1 = case.k_cache.clone(), case.v_cache.clone()
        want = step(case.q, key, k1, v1, slots, m.block_tables, m.seq_lens)
    torch.testing.assert_close(got, want)
    assert torch.equal(k2, k1) and torch.equal(v2, v1)  # the store happened in the graph too
    assert torch.equal(k2.view(-1, 3, 64)[slots], key)


_FALLBACK = """
import torch
from builtin_engine.kernels import packed_linear as pl
from builtin_engine.kernels.cpu_decode_attention import cpu_decode_attention_available
from builtin_engine.kernels.step_ops import define_step_ops
assert define_step_ops() == "Python" and not cpu_decode_attention_available()
k_cache = torch.zeros(2, 16, 1, 4)
torch.ops.inferplane.store_kv(torch.ones(1, 1, 4), torch.ones(1, 1, 4), k_cache,
                              k_cache.clone(), torch.tensor([3]))
assert k_cache.view(-1, 4)[3].tolist() == [1.0] * 4
weight, x = torch.randn(8, 4), torch.randn(3, 4)
pl.pack_weight(weight, 4)
f = torch.compile(lambda x: torch.ops.inferplane.packed_linear(x, weight), fullgraph=True)
torch.testing.assert_close(f(x), x @ weight.T, rtol=1e-4, atol=1e-4)
print("fallback ok")
"""


def test_without_the_extension_the_same_ops_are_python_custom_ops():
    """INFERPLANE_CPU_ATTENTION=0 (as where no compiler works): a fresh process defines
    store_kv and packed_linear in Python, and they behave the same."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT
    env = {**os.environ, "INFERPLANE_CPU_ATTENTION": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fallback ok" in done.stdout

"""Projection weights prepacked for oneDNN on CPU: one blocked copy per weight, made at load.

    count = pack_model(model, batch_hint=64)    # after load (and quantization): CPU only
    y = linear(x, layer.qkv_proj)               # eager: the packed copy when there is one
    y = packed_linear(x, layer.qkv_proj)   # the same as an op inside torch.compile
                                           # (kernels/step_ops.py defines it: C++ or Python)

A float32 or bfloat16 `F.linear` on CPU reorders its weight into the GEMM's blocked layout
on every call; at decode sizes (16-64 rows against a 576-3072 wide weight) that reorder is a
large part of the call. oneDNN's `_reorder_linear_weight` does it once, and
`_linear_pointwise` then runs the matmul on the packed copy: measured on 2 AVX2 cores at 64
rows, gate/up 4.1 -> 1.9 ms and the LM head 62.6 -> 35.9 ms; at 512 rows (prefill) it is
level or faster. This is what inductor's weight freezing does for CPU linears, and what vLLM's
CPU backend does with its oneDNN matmuls; here it is done once at load, so it also serves the
eager prefill path and compiled decode graphs whose weights are inputs, not constants.

On CPUs with AMX tiles the C++ op's table also gets a tile copy of each bfloat16 weight
(`tile_copy`: 32-column blocks in the pair layout of the tile product) once it is attached
(kernels/step_ops.py); the op multiplies up to 64 rows (32 against the LM head) through ATen's
brgemm on it, without oneDNN's per-call cost (csrc/step_ops.cpp says what was measured). That
is a third copy of the weights in memory (~270 MB for SmolLM2-135M in bfloat16).

The packed copy is keyed by the dense weight's storage address, which stays put for the
model's lifetime (the entry is dropped when the weight is freed); the dense weight is kept (LoRA merges, quantization and tests read it), so
packing adds one copy of the projection weights to memory. Results differ from `F.linear`
by float rounding only (a different summation order): greedy text in float32 stays identical
to HF transformers (tests/builtin_engine/model/test_packed_linear.py and the parity tests).
"""
from __future__ import annotations

import logging
import os
import time
import weakref

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

_PACKED: dict[int, torch.Tensor] = {}  # dense weight data_ptr -> its oneDNN packed copy
_DENSE: dict[int, weakref.ref] = {}  # the same keys -> the dense weight, for its tile copy
TILE_COLUMNS = 32  # columns of one block of a tile copy (step_ops.cpp's kTileColumns)
_native = {"table": None}  # the C++ op's copy of _PACKED and of the row cap (step_ops.cpp)
PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_reorder_linear_weight")


def pack_weight(weight: torch.Tensor, batch_hint: int) -> bool:
    """Register a packed copy of `weight` [out, in]; False where it cannot be packed."""
    if (weight.device.type != "cpu" or weight.dtype not in PACKABLE_DTYPES
            or weight.dim() != 2 or not weight.is_contiguous()):
        return False
    try:
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), max(1, batch_hint))
    except RuntimeError as exc:  # e.g. bfloat16 on a CPU without AVX512/AVX-NE-CONVERT
        logger.debug("not packing a %s weight: %s", weight.dtype, exc)
        return False
    key = weight.data_ptr()
    remember(key, packed, weight)
    # A freed weight's address is reused by the next allocation: its entry must go with it.
    weakref.finalize(weight, _forget, key, packed)
    return True


def remember(key: int, packed: torch.Tensor, weight: torch.Tensor | None = None) -> None:
    """Register `packed` as the copy of the weight at address `key` (here and in C++), and
    `weight`'s tile copy in C++ where the op takes one."""
    _PACKED[key] = packed
    if weight is not None:
        _DENSE[key] = weakref.ref(weight)
    if _native["table"] is not None:
        _native["table"].remember(key, packed)
        _remember_tiles(_native["table"], key)


def tile_copy(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` [N, K] as the C++ op's tile path reads it: each block of TILE_COLUMNS
    columns one contiguous run of [K/2][TILE_COLUMNS][2] (a column's pair of bfloat16 a
    32-bit word); None for weights that path does not take."""
    if (weight.dtype != torch.bfloat16 or weight.dim() != 2 or not weight.is_contiguous()
            or weight.shape[0] % TILE_COLUMNS or weight.shape[1] % 2):
        return None
    n, k = weight.shape
    blocks = weight.detach().view(n // TILE_COLUMNS, TILE_COLUMNS, k // 2, 2)
    return blocks.permute(0, 2, 1, 3).contiguous().view(-1)


def _remember_tiles(module, key: int) -> None:
    """The tile copy of the weight at `key` into the C++ table, on CPUs with AMX tiles (the
    copy adds one more copy of the weight to memory; elsewhere nothing is made)."""
    weight = _DENSE[key]() if key in _DENSE else None
    if weight is None or not module.tiles_ready():
        return
    tiles = tile_copy(weight)
    if tiles is not None:
        module.remember_tiles(key, tiles)


def _forget(key: int, packed: torch.Tensor) -> None:
    if _PACKED.get(key) is packed:
        del _PACKED[key]
        _DENSE.pop(key, None)
    if _native["table"] is not None:
        _native["table"].forget(key, packed)


def unpack_weight(weight: torch.Tensor) -> None:
    _PACKED.pop(weight.data_ptr(), None)
    _DENSE.pop(weight.data_ptr(), None)
    if _native["table"] is not None:
        _native["table"].forget_any(weight.data_ptr())


def attach_native_table(module) -> None:
    """Mirror the table (and the row cap) into the C++ op's from now on (kernels/step_ops.py
    calls it once it has loaded the extension; None: the op is Python and reads _PACKED)."""
    _native["table"] = module
    if module is not None:
        for key, packed in _PACKED.items():
            module.remember(key, packed)
            _remember_tiles(module, key)
        module.set_row_cap(_row_cap["rows"])


def is_packed(weight: torch.Tensor) -> bool:
    return weight.data_ptr() in _PACKED


# Above this many rows the packed copy may stop paying: the GEMM's own reorder is amortised
# over the rows. Which side wins a long prefill step depends on the CPU: at 2048 rows MKL's
# sgemm measured 1.3x faster on a Zen 2 host, and the packed copy 1.14-1.15x faster on a Zen 1
# host, so `calibrate_row_cap` times both at load and raises the cap where packed wins.
PACKED_MAX_ROWS = 512
_row_cap = {"rows": PACKED_MAX_ROWS, "why": f"up to {PACKED_MAX_ROWS} rows (default)"}
_calibrated: dict[tuple, tuple[int, str]] = {}  # (shape, dtype, rows, threads) -> the cap
ROWS_ENV = "INFERPLANE_PACKED_ROWS"  # a fixed cap instead of the measured one


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight) (no bias), on the packed copy when one is registered: through the
    C++ op once its table is attached (so eager calls, the LM head's among them, take the
    tile copy too), else oneDNN's copy from here."""
    if _native["table"] is not None:
        return torch.ops.inferplane.packed_linear(x, weight)
    packed = _PACKED.get(weight.data_ptr())
    if (packed is None or x.dtype != weight.dtype or x.shape[0] > _row_cap["rows"]
            or packed.shape != weight.shape):
        return F.linear(x, weight)
    return _packed_mm(x, packed)


def _packed_mm(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def packed_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`linear` as the opaque op `inferplane::packed_linear` (kernels/step_ops.py, defined
    once `define_step_ops()` has run): inductor calls it like an extern matmul. (Inductor's own
    lowering of `_linear_pointwise` only accepts weights frozen into the graph as constants.)"""
    return torch.ops.inferplane.packed_linear(x, weight)


def pack_model(model, batch_hint: int, names=("qkv_proj", "o_proj", "gate_up_proj",
                                             "down_proj")) -> int:
    """Pack each decoder layer's projections and the LM head; returns how many were packed.
    Quantized projections (not plain tensors) and non-CPU models are left as they are."""
    if not packing_available():
        logger.info("oneDNN weight packing unavailable: projections use F.linear")
        return 0
    count = 0
    for layer in model.layers:
        for name in names:
            weight = getattr(layer, name)
            count += isinstance(weight, torch.Tensor) and pack_weight(weight, batch_hint)
    count += pack_weight(model.lm_head, batch_hint)
    return count


def row_cap() -> tuple[int, str]:
    """(rows up to which linear takes the packed copy, why) for the startup line."""
    return _row_cap["rows"], _row_cap["why"]


def set_row_cap(rows: int, why: str) -> None:
    _row_cap.update(rows=rows, why=why)
    if _native["table"] is not None:
        _native["table"].set_row_cap(rows)


def _fastest_ms(fns, repeats: int = 5) -> list[float]:
    """The fastest of `repeats` timed calls of each function, in ms, the calls taking turns: a
    burst of other work on the host then slows one call of each side, not one side (with
    three calls a side in a row, a host running other work flipped the cap between runs)."""
    for fn in fns:
        fn()  # the first call allocates oneDNN's and MKL's scratch buffers
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return [b * 1e3 for b in best]


def calibrate_row_cap(weight: torch.Tensor, rows: int) -> tuple[int, str]:
    """Time the packed copy of `weight` against F.linear at `rows` rows (the largest step the
    engine schedules) and take the packed copy for every row count where it is as fast; a
    weight without a packed copy (a quantized one is not a tensor), or `rows` within the default
    cap, changes nothing."""
    forced = os.environ.get(ROWS_ENV, "").strip()
    if forced:  # the operator's choice (and an A/B switch for benchmarks): no measuring
        if not forced.isdigit():
            raise ValueError(f"{ROWS_ENV}={forced!r}: expected a whole number of rows")
        set_row_cap(int(forced), f"up to {forced} rows ({ROWS_ENV})")
        return row_cap()
    packed = _PACKED.get(weight.data_ptr()) if isinstance(weight, torch.Tensor) else None
    if packed is None or rows <= PACKED_MAX_ROWS:
        return row_cap()
    key = (tuple(weight.shape), weight.dtype, rows, torch.get_num_threads())
    if key not in _calibrated:  # once a process: every engine a test suite loads shares it
        _calibrated[key] = _measure(weight, packed, rows)
    set_row_cap(*_calibrated[key])
    return row_cap()


def _measure(weight: torch.Tensor, packed: torch.Tensor, rows: int) -> tuple[int, str]:
    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
    with torch.inference_mode():
        dense, blocked = _fastest_ms([lambda: F.linear(x, weight), lambda: _packed_mm(x, packed)])
    measured = f"at {rows} rows packed {blocked:.1f} ms, unpacked {dense:.1f} ms"
    cap = rows if blocked <= dense else PACKED_MAX_ROWS
    return cap, f"up to {cap} rows: {measured}"

"""The prefill pacer keeps a mixed step under `stretch` x its decode rows' own time, from
costs it learns off step times; before it knows them, the fixed ratio applies."""
from __future__ import annotations

from builtin_engine.core.prefill_pacer import PrefillPacer


def test_the_ratio_applies_until_both_costs_are_known():
    pacer = PrefillPacer(stretch=3.0, floor=8, ratio=12)
    assert pacer.room(4) == 48 and pacer.room(0) == 8
    pacer.observe(decoding=4, prefill_tokens=0, seconds=0.020)   # row cost only
    assert pacer.room(4) == 48
    pacer.observe(decoding=0, prefill_tokens=500, seconds=0.5)   # prefill alone: no lesson
    assert pacer.token_s is None


def test_cheap_tokens_get_a_large_room_and_dear_ones_a_small_one():
    pacer = PrefillPacer(stretch=3.0, floor=8, ratio=12)
    pacer.observe(decoding=64, prefill_tokens=0, seconds=0.100)          # 1.56 ms a row
    pacer.observe(decoding=64, prefill_tokens=256, seconds=0.100 + 256 * 0.0003)
    burst = pacer.room(64)
    assert 600 < burst < 700          # 2 x 100 ms of decode / 0.3 ms a token
    for _ in range(20):               # a long prompt's deep chunks: 4 ms a token
        pacer.observe(decoding=64, prefill_tokens=40, seconds=0.100 + 40 * 0.004)
    deep = pacer.room(64)
    assert 45 <= deep <= 55           # 200 ms / 4 ms
    # the step the room allows stays within the stretch of the decode rows' time
    assert 0.100 + deep * 0.004 <= 3.0 * 0.100 * 1.05


def test_rows_still_to_join_scale_the_room():
    pacer = PrefillPacer(stretch=3.0, floor=8, ratio=12)
    assert pacer.room(4, rows=10) == 120 and pacer.room(4, rows=2) == 48  # never below decoding
    pacer.observe(decoding=4, prefill_tokens=0, seconds=0.020)            # 5 ms a row
    pacer.observe(decoding=4, prefill_tokens=100, seconds=0.020 + 100 * 0.001)
    assert pacer.room(4) == 40                  # 2 x 20 ms / 1 ms
    assert pacer.room(4, rows=64) == 640        # 2 x (64 rows x 5 ms) / 1 ms


def test_floor_and_disabled_stretch():
    pacer = PrefillPacer(stretch=3.0, floor=8, ratio=12)
    pacer.observe(decoding=2, prefill_tokens=0, seconds=0.010)
    pacer.observe(decoding=2, prefill_tokens=8, seconds=0.010 + 8 * 0.05)   # very dear tokens
    assert pacer.room(2) == 8
    fixed = PrefillPacer(stretch=1.0, floor=8, ratio=12)
    fixed.observe(decoding=2, prefill_tokens=0, seconds=0.010)
    fixed.observe(decoding=2, prefill_tokens=8, seconds=0.020)
    assert fixed.room(10) == 120

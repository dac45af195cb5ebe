"""Canary ratios, sticky A/B assignment, shadow isolation and similarity."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from gateway.traffic.splits import ShadowMirror, choose, sticky_point, text_similarity


def test_canary_ratio_within_tolerance_over_10k_keys():
    weights = {"v1": 90, "v2": 10}
    picks = [choose(weights, sticky_key=f"user-{i}", salt="chat") for i in range(10_000)]
    share = picks.count("v2") / len(picks)
    assert abs(share - 0.10) < 0.015


def test_sticky_and_stable_across_processes():
    keys = [f"session-{i}" for i in range(50)]
    here = [choose({"a": 50, "b": 50}, k, salt="alias") for k in keys]
    assert here == [choose({"b": 50, "a": 50}, k, salt="alias") for k in keys]  # order-free
    code = ("from gateway.traffic.splits import choose;"
            f"print(','.join(choose({{'a': 50, 'b': 50}}, k, salt='alias') for k in {keys!r}))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=60).stdout.strip().split(",")
    assert other == here
    assert 10 < here.count("a") < 40


def test_growing_canary_only_moves_users_onto_canary():
    keys = [f"u{i}" for i in range(3000)]
    before = {k: choose({"stable": 95, "zcanary": 5}, k) for k in keys}
    after = {k: choose({"stable": 80, "zcanary": 20}, k) for k in keys}
    assert all(after[k] == "zcanary" for k in keys if before[k] == "zcanary")
    assert sum(1 for k in keys if after[k] == "zcanary") > sum(
        1 for k in keys if before[k] == "zcanary")


def test_salt_decorrelates_splits_and_points_are_uniform():
    assert sticky_point("u1", "x") != sticky_point("u1", "y")
    points = [sticky_point(f"k{i}") for i in range(1000)]
    assert 0 <= min(points) and max(points) < 1
    assert 0.45 < sum(points) / len(points) < 0.55


def test_bad_weights():
    with pytest.raises(ValueError):
        choose({"a": 0}, "k")


def test_similarity():
    assert text_similarity("the cat sat", "the cat sat") == 1.0
    assert text_similarity("abc", "xyz") == 0.0
    assert 0.5 < text_similarity("the cat sat on the mat", "the cat sat on a mat") < 1.0
    assert text_similarity("a b c", "c b a", method="jaccard") == 1.0
    assert text_similarity("a b", "a c", method="jaccard") == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        text_similarity("a", "b", method="bleu")


async def _primary(mirror: ShadowMirror, shadow_factory) -> tuple[str, float]:
    started = time.monotonic()
    handle = mirror.mirror(shadow_factory, "chat", "v2")
    await asyncio.sleep(0.01)                   # the primary's own work
    text = "the answer is 42"
    if handle:
        handle.set_primary(text, time.monotonic() - started)
    return text, time.monotonic() - started


async def test_shadow_failure_and_slowness_never_affect_primary():
    records = []
    mirror = ShadowMirror(max_concurrency=4, timeout_s=0.3, on_record=records.append)

    async def failing() -> str:
        raise RuntimeError("shadow backend down")

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    for factory in (failing, slow):
        text, latency = await _primary(mirror, factory)
        assert text == "the answer is 42" and latency < 0.2
    await mirror.close()
    assert mirror.failed == 2                   # the error and the timeout
    assert {r.error.split(":")[0] for r in records} == {"RuntimeError", "TimeoutError"}
    assert all(r.similarity is None and r.primary_chars == 16 for r in records)


async def test_shadow_records_similarity_latency_and_length():
    records = []
    mirror = ShadowMirror(on_record=records.append)

    async def similar() -> str:
        await asyncio.sleep(0.02)
        return "the answer is 41"

    await _primary(mirror, similar)
    await mirror.close()
    (record,) = records
    assert record.model == "chat" and record.version == "v2" and record.error is None
    assert record.shadow_chars == 16 and record.shadow_latency_s >= 0.02
    assert record.primary_latency_s is not None and 0.9 < record.similarity < 1.0


async def test_saturated_shadow_is_dropped_not_queued():
    mirror = ShadowMirror(max_concurrency=2)
    started = []

    async def hang() -> str:
        started.append(1)
        await asyncio.sleep(10)
        return ""

    handles = [mirror.mirror(hang) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert sum(h is not None for h in handles) == 2
    assert mirror.dropped == 3 and len(started) == 2 and mirror.running == 2
    await mirror.close(timeout_s=0.01)
    assert mirror.running == 0

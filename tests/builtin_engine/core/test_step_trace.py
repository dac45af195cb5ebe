"""INFERPLANE_STEP_TRACE: one JSON line per executed step (what ran, how long it took)."""
from __future__ import annotations

import json

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.core.conftest import sim_engine


def test_every_executed_step_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv("INFERPLANE_STEP_TRACE", str(path))
    engine = sim_engine(max_num_batched_tokens=32)
    engine.generate([[5] * 40, [6] * 8], SamplingParams(max_tokens=3, ignore_eos=True))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == engine.num_steps
    assert sum(line["prompt_tokens"] for line in lines) == 48
    # two requests x 3 tokens: the first of each comes from its last prompt step
    assert sum(line["decode_rows"] for line in lines) == 4
    assert all(line["s"] >= 0 and line["cpu"] >= 0 for line in lines)
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines)


def test_no_trace_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("INFERPLANE_STEP_TRACE", raising=False)
    engine = sim_engine()
    engine.generate([[5] * 4], SamplingParams(max_tokens=2, ignore_eos=True))
    assert engine._trace is None

"""bench/guardrails_bench.py's pieces at tiny sizes: the prompts carry PII where they should,
and the stage measurement runs the real guard both ways."""
from __future__ import annotations

from bench.guardrails_bench import FULL_POLICY, prompts, stage_only
from gateway.guardrails.policy import CompiledPolicy


def test_prompts_are_about_1kb_and_half_carry_pii():
    texts = prompts(10)
    assert all(950 <= len(t) <= 1200 for t in texts)
    policy = CompiledPolicy.of("full", FULL_POLICY)
    with_pii = [bool(policy.scan(t).hits) for t in texts]
    assert with_pii[0::2] == [True] * 5


def test_stage_measured_both_ways():
    result = stage_only(prompts(4), repeat=1)
    assert result["request_full_us"] > result["request_off_us"] > 0
    assert result["stream_full_us"] > result["stream_off_us"] > 0
    assert result["events_per_answer"] > 200

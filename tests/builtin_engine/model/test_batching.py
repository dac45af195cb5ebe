"""A mixed batch (decode + chunked prefill with a cached prefix + fresh prefill) gives the
same tokens as running each request alone."""
from __future__ import annotations

from builtin_engine.core.sampling_params import SamplingParams
from tests.builtin_engine.model.driver import BlockAllocator, Sequence, generate, step

DECODE_STEPS = 6


def _prompts(tok) -> dict[str, list[int]]:
    def chat(text):
        return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
    return {
        "a": chat("Name a color."),
        "b": chat("Summarise the plot of Hamlet in two sentences, mentioning Denmark, the "
                  "ghost, Ophelia and the final duel, and keep it friendly for students."),
        "c": chat("Count from one to five in French."),
    }


def test_batched_equals_alone(loaded, runner):
    prompts = _prompts(loaded.tokenizer)
    greedy = SamplingParams(temperature=0.0)
    alone = {rid: generate(runner, ids, DECODE_STEPS + 1, request_id=rid)
             for rid, ids in prompts.items()}

    alloc = BlockAllocator(runner.block_size)
    seqs = {rid: Sequence(rid, ids, greedy) for rid, ids in prompts.items()}
    a, b, c = seqs["a"], seqs["b"], seqs["c"]
    # Step 1: a prefills whole; b computes its first 24 tokens without sampling.
    step(runner, alloc, [a, b], limits={"b": 24})
    assert len(a.output) == 1 and not b.output and b.computed == 24
    # Step 2: a decodes, b finishes its prefill on top of the cached prefix, c prefills.
    step(runner, alloc, [a, b, c])
    assert (len(a.output), len(b.output), len(c.output)) == (2, 1, 1)
    # Then everyone decodes together.
    while len(b.output) < DECODE_STEPS + 1:
        step(runner, alloc, [a, b, c])
    for rid, seq in seqs.items():
        assert seq.output[:DECODE_STEPS + 1] == alone[rid][:DECODE_STEPS + 1], rid

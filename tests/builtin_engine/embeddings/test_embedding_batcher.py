"""Batch planning and the batcher's hand-back of each input's own vector (real encoder)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from builtin_engine.embeddings.batcher import EmbeddingBatcher, plan_batches
from builtin_engine.embeddings.model import embedding_model_dir, load_embedder


@dataclass
class _Item:
    ids: list[int]


@given(st.lists(st.integers(1, 300), min_size=1, max_size=60), st.integers(1, 2048),
       st.integers(1, 16))
def test_plan_keeps_every_item_within_the_budget(lengths, budget, size):
    items = [_Item([0] * n) for n in lengths]
    batches = plan_batches(items, budget, size)
    assert sorted(id(i) for b in batches for i in b) == sorted(id(i) for i in items)
    for batch in batches:
        longest = max(len(i.ids) for i in batch)
        assert len(batch) <= size
        assert len(batch) == 1 or longest * len(batch) <= budget


def test_batcher_answers_each_input_with_its_own_vector():
    embedder = load_embedder(embedding_model_dir("all-minilm-l6-v2"))
    texts = ["one", "two words", "three words here", "x " * 40]
    ids = [embedder.encode_text(t) for t in texts]
    expected = np.stack([embedder.embed([i]).numpy()[0] for i in ids])

    async def run():
        batcher = EmbeddingBatcher(embedder, max_batch_tokens=64, max_batch_size=2)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.embed([i]) for i in ids),
                                        batcher.embed(ids))
        finally:
            await batcher.close()

    *singles, together = asyncio.run(run())
    assert np.allclose(np.concatenate(singles), expected, atol=1e-5)
    assert np.allclose(together, expected, atol=1e-5)

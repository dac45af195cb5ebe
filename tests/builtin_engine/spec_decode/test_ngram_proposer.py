"""NgramProposer: the continuation of the most recent earlier occurrence of the final n-gram."""
from __future__ import annotations

import pytest

from builtin_engine.core.ngram_proposer import NgramProposer


def test_proposes_the_tokens_after_the_latest_match():
    p = NgramProposer(n=2, k=3)
    assert p.propose([1, 2, 3, 4, 5, 1, 2]) == [3, 4, 5]
    # two earlier matches: the latest one wins
    assert p.propose([1, 2, 7, 1, 2, 8, 9, 1, 2]) == [8, 9, 1]


def test_draft_length_is_capped_by_k_max_tokens_and_the_sequence():
    p = NgramProposer(n=1, k=4)
    assert p.propose([5, 6, 7, 8, 9, 5]) == [6, 7, 8, 9]
    assert p.propose([5, 6, 7, 8, 9, 5], max_tokens=2) == [6, 7]
    assert p.propose([5, 6, 7, 8, 9, 5], max_tokens=0) == []
    assert p.propose([5, 6, 5]) == [6, 5]  # the match runs into the tail itself


def test_no_match_or_too_short_gives_no_draft():
    p = NgramProposer(n=3, k=4)
    assert p.propose([1, 2, 3, 4, 5, 6]) == []
    assert p.propose([1, 2, 3]) == []
    assert p.propose([]) == []


def test_search_window_bounds_the_lookup():
    p = NgramProposer(n=2, k=2, window=5)
    tokens = [1, 2, 3] + [0] * 10 + [9, 1, 2]
    assert NgramProposer(n=2, k=2).propose(tokens) == [3, 0]
    assert p.propose(tokens) == []  # the only match lies outside the last 5 tokens


@pytest.mark.parametrize("n, k", [(0, 1), (1, 0)])
def test_rejects_bad_sizes(n, k):
    with pytest.raises(ValueError):
        NgramProposer(n=n, k=k)

"""Prompt-lookup drafting: the tokens that followed the last earlier occurrence of the
sequence's final n-gram are proposed as its next tokens.

    proposer = NgramProposer(n=3, k=4)
    drafts = proposer.propose(req.token_ids, max_tokens=4)   # [] when the n-gram is new

Text that copies its context (summaries, code edits, quoting) repeats long runs of earlier
tokens, so a match predicts several tokens that the target model then confirms in one
forward pass. The search runs over a numpy view of the tail of the sequence: the cost is one
vectorised comparison per step, bounded by `window` tokens however long the request grows.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class NgramProposer:
    def __init__(self, n: int, k: int, window: int = 4096) -> None:
        if n < 1 or k < 1:
            raise ValueError(f"n-gram size and draft length must be >= 1, got n={n}, k={k}")
        self.n, self.k, self.window = n, k, window

    def propose(self, token_ids: list[int], max_tokens: int | None = None) -> list[int]:
        """Up to min(k, max_tokens) draft tokens continuing token_ids, most recent match."""
        k = self.k if max_tokens is None else min(self.k, max_tokens)
        n = self.n
        if k <= 0 or len(token_ids) <= n:
            return []
        tokens = np.asarray(token_ids[-self.window:], dtype=np.int64)
        tail = tokens[-n:]
        # Candidate starts exclude the tail itself, so every match has a continuation.
        windows = sliding_window_view(tokens[:-1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size == 0:
            return []
        start = int(hits[-1]) + n
        return tokens[start:start + k].tolist()

"""Per-request grammar matchers whose next-token bitmask is filled off the critical path.

    state = GrammarState(compiled, vocab_size)   # one per constrained request
    # in the sampler, step t:
    masks = [state.bitmask() for each constrained row]   # waits for the background fill
    apply_bitmasks(logits, rows, masks)
    state.advance(token)   # accept + fill of step t+1's mask run on the pool, returning at once

The fill for step t+1 runs on a small thread pool while the engine thread finishes step t's
bookkeeping and runs the next forward pass (xgrammar and torch's kernels both release the
GIL). Unconstrained rows never reach this module.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

import torch

log = logging.getLogger(__name__)
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar-mask")


class GrammarState:
    def __init__(self, compiled, vocab_size: int):
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self._mask = xgr.allocate_token_bitmask(1, vocab_size)
        self._pending: Future | None = _POOL.submit(self._fill)
        self.rejected = 0  # tokens the matcher refused (only when something overrode the mask)

    def _fill(self) -> None:
        if not self.matcher.is_terminated():
            self.matcher.fill_next_token_bitmask(self._mask)

    def _accept_and_fill(self, token: int) -> None:
        if self.matcher.is_terminated():
            return
        if not self.matcher.accept_token(token):
            self.rejected += 1
            log.warning("grammar matcher rejected token %d", token)
            return
        self._fill()

    def bitmask(self) -> torch.Tensor:
        """This step's bitmask (1, ceil(vocab/32)) int32; waits for its fill if still running."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        return self._mask

    def advance(self, token: int) -> None:
        """Accept the sampled token and start filling the next mask in the background."""
        self.bitmask()  # never two jobs on one matcher
        self._pending = _POOL.submit(self._accept_and_fill, token)

    @property
    def terminated(self) -> bool:
        self.bitmask()
        return self.matcher.is_terminated()


def apply_bitmasks(logits: torch.Tensor, rows: list[int], masks: list[torch.Tensor]) -> None:
    """Disallowed tokens of the given rows -> -inf, in place. Columns past the grammar's
    vocabulary (a model whose logits are padded wider than the tokenizer) are disallowed."""
    import xgrammar as xgr

    sub = logits[rows]
    bitmask = torch.cat(masks).to(logits.device)
    width = bitmask.shape[1] * 32
    if sub.shape[1] > width:
        sub[:, width:] = float("-inf")
    xgr.apply_token_bitmask_inplace(sub, bitmask, vocab_size=min(sub.shape[1], width))
    logits[rows] = sub

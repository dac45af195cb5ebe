"""How many prompt tokens one step may add while requests decode, learnt from step times.

    pacer = PrefillPacer(stretch=3.0, floor=16, ratio=12)
    room = pacer.room(decoding=4, rows=6)              # before the step is scheduled
    pacer.observe(decoding=4, prefill_tokens=48, seconds=0.09)   # after it ran

A step costs about decoding x row_s + prefill_tokens x token_s. A pure decode step teaches
row_s; a mixed step, with row_s known, teaches token_s. The room keeps a step at most
`stretch` times what the decode rows alone would take, so running streams' inter-token latency
grows by at most that factor while a long prompt is prefilled, and a burst of short prompts
(cheap tokens) is admitted in large chunks instead of a fixed trickle.

Why learnt and not fixed: a prompt token's cost grows with its attention context (a chunk deep
into a 4,096-token prompt costs ~10x one at its start on CPU) and differs per dtype and device,
while a decode row's cost depends on the batch. A fixed tokens-per-row ratio is either too slow
for bursts of short prompts or too fast for long ones; it remains the answer until both costs
have been seen. Estimates are exponential moving averages, so they follow a prompt's chunks as
they get deeper.
"""
from __future__ import annotations

SMOOTHING = 0.3   # weight of the newest observation


class PrefillPacer:
    def __init__(self, stretch: float, floor: int, ratio: int):
        self.stretch = stretch
        self.floor = floor
        self.ratio = ratio
        self.row_s: float | None = None     # seconds per decode row
        self.token_s: float | None = None   # seconds per prompt token (recent chunks)

    def room(self, decoding: int, rows: int = 0) -> int:
        """Prompt tokens the next step may take beside `decoding` decode rows (>= floor).

        `rows`: the decode rows the batch will hold once the requests the engine already has
        are all decoding (the running ones plus the waiting ones that fit). The step is bounded
        by that batch's decode time, not today's: a burst of prompts joins the batch anyway,
        so pacing it against the few rows already decoding only delays every request (a
        64-request burst then trickled in at ~100 prompt tokens a step).
        """
        rows = max(decoding, rows)
        if self.row_s is None or self.token_s is None or self.stretch <= 1:
            return max(self.floor, self.ratio * rows)
        allowed = (self.stretch - 1) * self.row_s * rows / self.token_s
        return max(self.floor, int(allowed))

    def observe(self, decoding: int, prefill_tokens: int, seconds: float) -> None:
        """One executed step: `decoding` decode rows and `prefill_tokens` prompt tokens."""
        if decoding <= 0 or seconds <= 0:
            return  # prefill alone says nothing about what a decode row costs
        if prefill_tokens == 0:
            self.row_s = _ewma(self.row_s, seconds / decoding)
            return
        if self.row_s is None:
            return
        # what the prompt tokens added; floored so one noisy step cannot make tokens "free"
        extra = max(seconds - self.row_s * decoding, 0.05 * seconds)
        self.token_s = _ewma(self.token_s, extra / prefill_tokens)


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)

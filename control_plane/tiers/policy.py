"""Request-rate tracking and the warm/cold decision with hysteresis.

Pure logic (no I/O, injected clock) so the thresholds can be reasoned about and tested alone.
Hot models are pinned: the policy never moves a model into or out of hot.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from common.vocabulary import Tier


class RateTracker:
    """Requests per second per model over a sliding window."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._events: dict[str, deque[tuple[float, int]]] = {}
        self._last: dict[str, float] = {}

    def note(self, model: str, now: float, count: int = 1) -> None:
        self._events.setdefault(model, deque()).append((now, count))
        self._last[model] = now

    def rate(self, model: str, now: float) -> float:
        events = self._events.get(model)
        if not events:
            return 0.0
        while events and events[0][0] <= now - self.window_s:
            events.popleft()
        return sum(c for _, c in events) / self.window_s

    def last_request(self, model: str) -> float | None:
        return self._last.get(model)


@dataclass
class TierDecision:
    model: str
    current: str
    target: str
    rate: float
    reason: str


def decide_tier(model: str, tier: str, rate: float, dwell_s: float, *, promote_rps: float,
                demote_rps: float, min_dwell_s: float, engine_room: bool) -> TierDecision | None:
    """The tier change for one model, or None to stay.

    cold → warm when the rate reaches promote_rps and an engine slot is free (a warm model
    keeps its engine resident); warm → cold when the rate falls to demote_rps. Between the two
    thresholds nothing moves, and no move happens before `min_dwell_s` in the current tier.
    """
    if tier == Tier.HOT or dwell_s < min_dwell_s:
        return None
    if tier == Tier.COLD and rate >= promote_rps:
        if not engine_room:
            return None
        return TierDecision(model, tier, Tier.WARM, rate,
                            f"{rate:.2f} req/s >= promote threshold {promote_rps}")
    if tier == Tier.WARM and rate <= demote_rps:
        return TierDecision(model, tier, Tier.COLD, rate,
                            f"{rate:.2f} req/s <= demote threshold {demote_rps}")
    return None

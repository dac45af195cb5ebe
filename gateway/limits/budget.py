"""USD budgets per key and team: worst-case cost held at admission, settled with the real cost.

Call pattern::

    budgets = [Budget("key", key_id, 10.0, period="day"), Budget("team", team, None)]
    hold, refused = await spend.reserve(budgets, estimate_usd)   # refused: a budget Decision
    ...                                                          # serve the request
    await spend.settle(hold, actual_usd)                         # also on partial output

`reserve` checks every budget and adds the estimate to every counter in one atomic step (a
Lua script on Redis), so concurrent requests can never spend past a budget together: the
request whose worst case does not fit in what is left is refused up front. A budget with a
`period` (hour, day, week, month; UTC calendar periods) counts spend in a counter of the
current period, so it resets when the period turns. A lifetime budget starts from
`recorded_usd`, the spend SQL already holds, so a gateway restart forgets nothing.

A hold is kept apart from the settled spend and expires after `hold_ttl_s`: the hold of a
request whose gateway died before settling it (SIGKILL, OOM, a lost node) is released then,
instead of staying charged for ever. A request that outlives its hold is still charged its
real cost when it settles. The default outlasts the longest request a gateway lets run.
"""
from __future__ import annotations

import abc
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Sequence

from common.budget_periods import period_bounds
from gateway.limits.types import Decision

DEFAULT_HOLD_TTL_S = 900.0   # > the gateway's total request timeout plus its queue timeout


@dataclass(frozen=True)
class Budget:
    scope: str                 # "key" | "team"
    subject: str
    max_usd: float | None      # None = no budget, spend is still tracked
    period: str | None = None  # None = lifetime
    recorded_usd: float = 0.0  # lifetime spend already in SQL: where a fresh counter starts

    def counter(self, now: datetime) -> "Counter":
        """The counter this budget charges at `now`: the current period's, or the lifetime one."""
        if self.period is None:
            return Counter(f"spend:{self.scope}:{self.subject}", 0, self.recorded_usd, self, None)
        start, end = period_bounds(self.period, now)
        ttl = int((end - start).total_seconds() * 2)  # settles of the last requests still land
        key = f"spend:{self.scope}:{self.subject}:{self.period}:{start:%Y%m%dT%H}"
        return Counter(key, ttl, 0.0, self, end)


@dataclass(frozen=True)
class Counter:
    key: str
    ttl_s: int                  # 0 = never expires
    floor: float                # spend a fresh counter starts from
    budget: Budget
    resets_at: datetime | None


@dataclass(frozen=True)
class Prices:
    in_per_1k: float = 0.0
    out_per_1k: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.in_per_1k + completion_tokens * self.out_per_1k) / 1000.0


@dataclass
class BudgetHold:
    """The estimate held on each counter at admission; `settle` replaces it by the real cost."""
    keys: tuple[str, ...]
    estimate_usd: float
    settled: bool = False
    hold_id: str = field(default_factory=lambda: os.urandom(16).hex())   # uuid4's randomness


def refusal(counter: Counter, spent: float, estimate: float, now: datetime) -> Decision:
    """The 429 for a budget that this request's worst case does not fit in."""
    budget, resets_at = counter.budget, counter.resets_at
    who = f"{budget.scope} budget (${budget.max_usd:.2f}" + (
        f" per {budget.period})" if budget.period else ")")
    if spent >= budget.max_usd:
        text = f"{who} is spent: ${spent:.4f} used"
    else:
        text = (f"{who} has ${budget.max_usd - spent:.4f} left and this request may cost up "
                f"to ${estimate:.4f}; lower max_tokens to fit")
    retry = None
    if resets_at is not None:
        text += f"; it resets at {resets_at:%Y-%m-%dT%H:%M:%SZ}"
        retry = max(1.0, (resets_at - now).total_seconds())
    return Decision(allowed=False, reason="budget", tripped=f"{budget.scope}:budget",
                    retry_after=retry, detail=text)


class SpendTracker(abc.ABC):
    hold_ttl_s: float = DEFAULT_HOLD_TTL_S
    clock = staticmethod(time.time)   # wall time: every replica agrees on when a hold expires

    async def reserve(self, budgets: Sequence[Budget], estimate_usd: float,
                      now: datetime | None = None) -> tuple[BudgetHold | None, Decision | None]:
        """Hold `estimate_usd` on every budget's counter, or refuse if one cannot take it."""
        if not budgets:
            return BudgetHold((), 0.0), None
        now = now or datetime.now(timezone.utc)
        counters = [b.counter(now) for b in budgets]
        hold = BudgetHold(tuple(c.key for c in counters), max(0.0, estimate_usd))
        result = await self._reserve(counters, hold, self.clock() + self.hold_ttl_s)
        if result is None:  # the store is down
            return None, self._store_down_decision()
        index, spent = result
        if index >= 0:
            return None, refusal(counters[index], spent, estimate_usd, now)
        return hold, None

    async def settle(self, hold: BudgetHold | None, actual_usd: float) -> None:
        """Release the hold and charge the real cost (0: nothing). Never raises."""
        if hold is None or hold.settled or not hold.keys:
            return
        hold.settled = True
        await self._settle(hold, max(0.0, actual_usd))

    async def spent(self, budget: Budget, now: datetime | None = None) -> float:
        """Settled spend plus the holds not yet expired."""
        counter = budget.counter(now or datetime.now(timezone.utc))
        settled, held = await self._get(counter.key) or (0.0, 0.0)
        return max(counter.floor, settled) + held

    def _store_down_decision(self) -> Decision | None:
        return None

    async def close(self) -> None:
        pass

    @abc.abstractmethod
    async def _reserve(self, counters: list[Counter], hold: BudgetHold,
                       expires_at: float) -> tuple[int, float] | None:
        """Drop expired holds; (-1, 0) when every counter took `hold` until `expires_at`,
        else (index, settled + held) of the first that could not; None: store unreachable."""

    @abc.abstractmethod
    async def _settle(self, hold: BudgetHold, usd: float) -> None:
        """Remove the hold (if not expired yet) and add `usd` to each existing counter."""

    @abc.abstractmethod
    async def _get(self, key: str) -> tuple[float, float] | None:
        """(settled, live holds) of a counter; None when it does not exist."""


def over_budget(budget: Budget, spent: float, estimate: float) -> bool:
    limit = budget.max_usd
    return limit is not None and (spent >= limit or spent + estimate > limit)


class InMemorySpendTracker(SpendTracker):
    """One gateway's counters; reserve runs without an await, so it is atomic in the loop."""

    def __init__(self, hold_ttl_s: float = DEFAULT_HOLD_TTL_S, clock=time.time) -> None:
        self.hold_ttl_s, self.clock = hold_ttl_s, clock
        self._spend: dict[str, float] = {}
        self._holds: dict[str, dict[str, tuple[float, float]]] = {}  # key: {id: (usd, until)}

    def _held(self, key: str) -> float:
        now = self.clock()
        holds = self._holds.get(key)
        if holds is None:
            holds = self._holds[key] = {}
        elif any(until <= now for _, until in holds.values()):   # rare: drop the expired
            holds = self._holds[key] = {i: h for i, h in holds.items() if h[1] > now}
        return sum(usd for usd, _ in holds.values())

    async def _reserve(self, counters: list[Counter], hold: BudgetHold,
                       expires_at: float) -> tuple[int, float]:
        spent = [max(c.floor, self._spend.get(c.key, 0.0)) for c in counters]
        held = [self._held(c.key) for c in counters]
        for i, c in enumerate(counters):
            if over_budget(c.budget, spent[i] + held[i], hold.estimate_usd):
                return i, spent[i] + held[i]
        for c, value in zip(counters, spent):
            self._spend[c.key] = value
            self._holds[c.key][hold.hold_id] = (hold.estimate_usd, expires_at)
        return -1, 0.0

    async def _settle(self, hold: BudgetHold, usd: float) -> None:
        for key in hold.keys:
            self._holds.get(key, {}).pop(hold.hold_id, None)
            if key in self._spend:
                self._spend[key] += usd

    async def _get(self, key: str) -> tuple[float, float] | None:
        return (self._spend[key], self._held(key)) if key in self._spend else None

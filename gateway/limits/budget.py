"""Spend tracking in USD per key and team, and `max_budget` enforcement.

Call pattern::

    budgets = [Budget("key", key.key_id, key.max_budget), Budget("team", key.team, team_max)]
    rejection = await spend.check(budgets)           # before serving; None = within budget
    ...
    cost = Prices(model.price_in_per_1k, model.price_out_per_1k).cost(prompt, completion)
    await spend.record(budgets, cost)                # after serving (also on partial output)

A check and the later record are not one atomic step: concurrent requests can overshoot a
budget by what they spend in flight. `seed` loads spend already recorded in SQL at start-up.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

import redis.asyncio as aioredis

from gateway.limits.outage import STORE_ERRORS, FailMode, OutageLog, check_fail_mode, make_client
from gateway.limits.types import Decision


@dataclass(frozen=True)
class Budget:
    scope: str                 # "key" | "team"
    subject: str
    max_usd: float | None      # None = no budget, spend is still tracked

    @property
    def storage_key(self) -> str:
        return f"spend:{self.scope}:{self.subject}"


@dataclass(frozen=True)
class Prices:
    in_per_1k: float = 0.0
    out_per_1k: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.in_per_1k + completion_tokens * self.out_per_1k) / 1000.0


class SpendTracker(abc.ABC):
    async def check(self, budgets: Sequence[Budget]) -> Decision | None:
        """A rejecting Decision (reason "budget") when any budget is spent, else None."""
        limited = [b for b in budgets if b.max_usd is not None]
        if not limited:
            return None
        spent = await self._get([b.storage_key for b in limited])
        if spent is None:
            return self._store_down_decision()
        for budget, value in zip(limited, spent):
            if value >= budget.max_usd:
                return Decision(allowed=False, reason="budget", tripped=f"{budget.scope}:budget")
        return None

    async def record(self, budgets: Sequence[Budget], usd: float) -> None:
        """Add `usd` to every subject's spend. Never raises."""
        if usd > 0 and budgets:
            await self._add([b.storage_key for b in budgets], usd)

    async def spent(self, budget: Budget) -> float:
        values = await self._get([budget.storage_key])
        return 0.0 if values is None else values[0]

    async def seed(self, budget: Budget, usd: float) -> None:
        """Set a subject's spend (from the SQL usage table when a gateway starts)."""
        await self._set(budget.storage_key, usd)

    def _store_down_decision(self) -> Decision | None:
        return None

    async def close(self) -> None:
        pass

    @abc.abstractmethod
    async def _get(self, keys: list[str]) -> list[float] | None: ...

    @abc.abstractmethod
    async def _add(self, keys: list[str], usd: float) -> None: ...

    @abc.abstractmethod
    async def _set(self, key: str, usd: float) -> None: ...


class InMemorySpendTracker(SpendTracker):
    def __init__(self) -> None:
        self._spend: dict[str, float] = {}

    async def _get(self, keys: list[str]) -> list[float]:
        return [self._spend.get(k, 0.0) for k in keys]

    async def _add(self, keys: list[str], usd: float) -> None:
        for key in keys:
            self._spend[key] = self._spend.get(key, 0.0) + usd

    async def _set(self, key: str, usd: float) -> None:
        self._spend[key] = usd


class RedisSpendTracker(SpendTracker):
    """Spend shared by replicas (INCRBYFLOAT). Redis down: fail_open lets requests through,
    fail_closed rejects with reason "unavailable"; spend recorded during the outage is lost."""

    def __init__(self, client: aioredis.Redis | str, prefix: str = "inferplane:{rl}:",
                 fail_mode: FailMode = "fail_open") -> None:
        self.fail_mode = check_fail_mode(fail_mode)
        self._owns_client = isinstance(client, str)
        self.redis = make_client(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.outage = OutageLog("budget tracker", self.fail_mode)

    async def _get(self, keys: list[str]) -> list[float] | None:
        try:
            values = await self.redis.mget([self.prefix + k for k in keys])
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return None
        self.outage.succeeded()
        return [float(v) if v is not None else 0.0 for v in values]

    async def _add(self, keys: list[str], usd: float) -> None:
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                for key in keys:
                    pipe.incrbyfloat(self.prefix + key, usd)
                await pipe.execute()
        except STORE_ERRORS as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()

    async def _set(self, key: str, usd: float) -> None:
        try:
            await self.redis.set(self.prefix + key, repr(float(usd)))
        except STORE_ERRORS as exc:
            self.outage.failed(exc)

    def _store_down_decision(self) -> Decision | None:
        if self.fail_mode == "fail_open":
            return None
        return Decision(allowed=False, reason="unavailable", tripped="store", retry_after=1.0)

    async def close(self) -> None:
        if self._owns_client:
            await self.redis.aclose()

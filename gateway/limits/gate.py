"""Rate limits and budgets on the request path: which limits apply to a principal, the 429,
and settling reservations with the engine's real usage once a request is done."""
from __future__ import annotations

import asyncio
import logging

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.limits import (Budget, Limit, Prices, TokenEstimator, create_rate_limiter,
                            create_spend_tracker, reservation_tokens)
from gateway.request_path.eager import start_eagerly
from gateway.settings import GatewaySettings

log = logging.getLogger("inferplane.gateway")
DEFAULT_MAX_TOKENS = 1024


class LimitsGate:
    def __init__(self, settings: GatewaySettings, metrics):
        self.settings = settings
        self.metrics = metrics
        fail_mode = settings.limits.fail_mode
        self.limiter = create_rate_limiter(settings.redis_url, fail_mode)
        self.spend = create_spend_tracker(settings.redis_url, fail_mode,
                                          hold_ttl_s=settings.limits.budget_hold_s)
        self.estimator = TokenEstimator()
        self._pending: set[asyncio.Task] = set()

    def limits_for(self, principal, snapshot) -> list[Limit]:
        d = self.settings.limits
        out = [Limit("key", principal.key_id, rpm=principal.rpm_limit or d.rpm,
                     tpm=principal.tpm_limit or d.tpm)]
        if principal.team:
            team = getattr(snapshot, "teams", {}).get(principal.team)
            rpm = team.rpm_limit if team is not None and team.rpm_limit is not None else d.team_rpm
            tpm = team.tpm_limit if team is not None and team.tpm_limit is not None else d.team_tpm
            out.append(Limit("team", principal.team, rpm=rpm, tpm=tpm))
        return out

    def budgets_for(self, principal, snapshot) -> list[Budget]:
        """The key's and the team's budgets, or none when neither has a limit (max_usd): a
        request no budget binds then takes no hold (its spend is still recorded in the usage
        rows in SQL, which a lifetime budget set later starts from)."""
        out = [Budget("key", principal.key_id, principal.max_budget, principal.budget_period,
                      principal.spend)]
        if principal.team:
            team = getattr(snapshot, "teams", {}).get(principal.team)
            out.append(Budget("team", principal.team, team.max_budget, team.budget_period,
                              team.spend) if team else Budget("team", principal.team, None))
        return out if any(b.max_usd is not None for b in out) else []

    async def admit(self, principal, snapshot, model_view, prompt: int, max_tokens: int | None):
        """(rate-limit decision, budget hold) for an admitted request; raises the OpenAI 429
        otherwise. The budget holds this request's worst-case cost until `settle`."""
        tokens = reservation_tokens(prompt, max_tokens, DEFAULT_MAX_TOKENS,
                                    model_view.context_length)
        budgets = self.budgets_for(principal, snapshot)
        hold = None   # no budget binds: nothing to hold, nothing to settle
        if budgets:
            prices = Prices(model_view.price_in_per_1k or 0.0,
                            model_view.price_out_per_1k or 0.0)
            hold, refused = await self.spend.reserve(budgets, prices.cost(prompt,
                                                                          max(0, tokens - prompt)))
            if refused is not None:
                self._reject(model_view.name, refused, ErrorCode.BUDGET_EXCEEDED)
        decision = await self.limiter.acquire(self.limits_for(principal, snapshot), tokens)
        if not decision.allowed:
            await self.spend.settle(hold, 0.0)
            code = ErrorCode.RATE_LIMIT_EXCEEDED if decision.reason != "too_large" else ErrorCode.TOKENS_EXCEEDED
            self._reject(model_view.name, decision, code)
        return decision, hold

    def _reject(self, model: str, decision, code: str) -> None:
        reason = decision.reason or "rate_limit"
        self.metrics.rejections.labels(model, reason).inc()
        status = 503 if reason == "unavailable" else 429
        raise OpenAIError(status, decision.message, type="rate_limit_error" if status == 429
                          else None, code=code, headers=decision.headers())

    def settle(self, decision, hold, tokens: int, cost: float) -> None:
        """Refund/charge TPM and swap the budget hold for the real cost, off the response path.

        Run at once as far as it goes without waiting (all of it with the in-process stores);
        only what waits on a remote store (Redis, the workers' shared store) becomes a task."""
        start_eagerly(self._settle(decision.reservation, hold, tokens, cost), self._pending)

    async def _settle(self, reservation, hold, tokens: int, cost: float) -> None:
        try:
            await self.limiter.reconcile(reservation, tokens)
            if hold is not None:
                await self.spend.settle(hold, cost)
        except Exception:
            log.exception("settling rate limits failed")

    async def close(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.limiter.close()
        await self.spend.close()

"""LimitsGate: no budget hold when no budget binds, and settling without a task per request
where the stores answer in-process (a task only for what waits on a remote store)."""
import asyncio
from types import SimpleNamespace

from gateway.limits.gate import LimitsGate
from gateway.observability.metrics import GatewayMetrics
from gateway.settings import GatewaySettings

MODEL = SimpleNamespace(name="m", context_length=4096, price_in_per_1k=1.0,
                        price_out_per_1k=2.0)


def principal(max_budget=None, team=None):
    return SimpleNamespace(key_id=7, rpm_limit=1000, tpm_limit=100_000, team=team,
                           max_budget=max_budget, budget_period=None, spend=0.0)


def _gate() -> LimitsGate:
    return LimitsGate(GatewaySettings(), GatewayMetrics())


async def _budgeted(gate: LimitsGate):
    """(decision, hold) of a request by a key with a budget."""
    return await gate.admit(principal(max_budget=5.0), SimpleNamespace(teams={}), MODEL, 10, 20)


def test_no_budget_no_hold_and_settled_without_a_task():
    async def run():
        gate = _gate()
        snapshot = SimpleNamespace(teams={})
        decision, hold = await gate.admit(principal(), snapshot, MODEL, 10, 20)
        assert hold is None and gate.budgets_for(principal(), snapshot) == []
        gate.settle(decision, hold, 15, 0.01)
        assert not gate._pending and decision.reservation.settled
        await gate.close()
    asyncio.run(run())


def test_a_budget_holds_and_is_settled_in_process():
    async def run():
        gate = _gate()
        snapshot = SimpleNamespace(teams={})
        decision, hold = await gate.admit(principal(max_budget=5.0), snapshot, MODEL, 10, 20)
        assert hold is not None and not hold.settled
        gate.settle(decision, hold, 15, 0.01)
        assert hold.settled and not gate._pending
        budget = gate.budgets_for(principal(max_budget=5.0), snapshot)[0]
        assert await gate.spend.spent(budget) == 0.01
        await gate.close()
    asyncio.run(run())


def test_settling_that_waits_on_a_store_finishes_in_a_task():
    async def run():
        gate = _gate()
        decision, hold = await _budgeted(gate)
        released = asyncio.Event()
        reconcile = gate.limiter.reconcile

        async def slow_reconcile(reservation, tokens):
            await asyncio.wait_for(released.wait(), 5)   # a future, as a socket read gives
            await asyncio.sleep(0)                        # and a bare yield
            await reconcile(reservation, tokens)

        gate.limiter.reconcile = slow_reconcile
        gate.settle(decision, hold, 15, 0.01)
        assert len(gate._pending) == 1 and not hold.settled
        released.set()
        await asyncio.wait_for(asyncio.gather(*gate._pending), 5)
        assert hold.settled and decision.reservation.settled and not gate._pending
        await gate.close()
    asyncio.run(run())


def test_a_cancelled_settle_task_cancels_the_waiting_store_call():
    async def run():
        gate = _gate()
        decision, hold = await _budgeted(gate)
        cancelled = asyncio.Event()

        async def stuck(reservation, tokens):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        gate.limiter.reconcile = stuck
        gate.settle(decision, hold, 15, 0.01)
        (task,) = gate._pending
        await asyncio.sleep(0)   # the task waits on the store's future now
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert cancelled.is_set() and task.cancelled()
    asyncio.run(run())

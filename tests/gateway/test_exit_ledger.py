"""ExitLedger: exits run once, last pushed first, all of them even when one raises."""
from __future__ import annotations

import pytest

from gateway.request_path.exit_ledger import ExitLedger


async def test_exits_run_in_reverse_and_awaited_ones_are_awaited():
    ran: list[str] = []

    async def later(name):
        ran.append(name)

    exits = ExitLedger()
    exits.push(ran.append, "first pushed")
    exits.push_awaited(later, "awaited")
    exits.push(ran.append, "last pushed")
    await exits.close()
    assert ran == ["last pushed", "awaited", "first pushed"]
    await exits.close()   # nothing left: a second close runs nothing again
    assert len(ran) == 3


async def test_a_failing_exit_does_not_keep_the_rest_from_running():
    ran: list[str] = []

    def boom(message):
        raise RuntimeError(message)

    exits = ExitLedger()
    exits.push(ran.append, "released")
    exits.push(boom, "first error")
    exits.push(boom, "second error")
    with pytest.raises(RuntimeError, match="second error"):   # the first to fail is raised
        await exits.close()
    assert ran == ["released"]

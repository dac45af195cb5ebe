"""Standing by until this process leads: one attempt per poll, whatever the election.

    await stand_by(lambda: lease.try_acquire(), poll_s=1.0, on_wait=say_standby)
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger("inferplane.leader")


async def stand_by(try_acquire: Callable[[], Awaitable[bool]], poll_s: float,
                   on_wait: Callable[[], None] | None = None) -> None:
    """Return once `try_acquire()` wins; `on_wait()` once, when the first attempt did not.
    A failing attempt (the database or Redis still starting) is logged and tried again."""
    waiting = False
    while True:
        try:
            if await try_acquire():
                return
        except Exception as exc:
            log.warning("leader election: %s", exc)
        if not waiting and on_wait is not None:
            on_wait()
            waiting = True
        await asyncio.sleep(poll_s)

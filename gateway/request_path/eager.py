"""Start a coroutine at once, in the caller's turn of the loop; a task only if it must wait.

    task = start_eagerly(limiter.reconcile(reservation, tokens), pending)   # None: done

Bookkeeping after an answer (settling limits, closing an upstream stream) usually finishes
without waiting on anything (in-process stores, a stream already read to its end), and a
task per request for it costs more than the work (creation, scheduling, the loop's weak set
of tasks). Python 3.12's eager task factory does this for every task; this does it for the
few coroutines the hot path hands off. The coroutine runs until its first real wait; only
then does a task take it over (kept in `pending` until done, as the loop holds tasks weakly).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Coroutine

log = logging.getLogger("inferplane.gateway")


def start_eagerly(work: Coroutine, pending: set[asyncio.Task]) -> asyncio.Task | None:
    """Run `work` now; the task finishing it when it waits (added to `pending`), else None."""
    try:
        waiting_on = work.send(None)
    except StopIteration:
        return None
    except Exception:   # as a task's unretrieved exception would be: logged, not raised
        log.exception("%r failed", work)
        return None
    task = asyncio.get_running_loop().create_task(_finish(work, waiting_on))
    pending.add(task)
    task.add_done_callback(pending.discard)
    return task


async def _finish(work: Coroutine, waiting_on) -> None:
    """Drive a coroutine that was started by hand (`work.send(None)` returned `waiting_on`,
    the future it waits for) to its end, as the event loop's task would have."""
    try:
        while True:
            if waiting_on is not None:
                # What a task does with a yielded future: take it off "blocking", then wait.
                waiting_on._asyncio_future_blocking = False
                try:
                    await waiting_on
                except BaseException as exc:   # the coroutine reads a done future's outcome
                    if not waiting_on.done():  # this task was cancelled: the coroutine too
                        waiting_on = work.throw(exc)
                        continue
            waiting_on = work.send(None)
    except StopIteration:
        return
    finally:
        work.close()   # cancelled before it ran: the coroutine's own cleanup still runs

"""The engines' own load, polled for the router (its LoadBook), every backend once a tick.

    task = asyncio.create_task(poll_engine_load(services))   # the app's lifespan runs it

A backend whose poll fails (no /metrics: an OpenAI-compatible server that is no engine, a
hosted API typed `openai`; a backend that is down) is asked again after a wait that doubles
with each failure in a row, up to MAX_BACKOFF_S: every worker of every gateway would
otherwise send it a request a tick, forever, for an answer it never gives. The first
success polls it every tick again; a backend the snapshot drops is forgotten.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from common.vocabulary import BackendState, EngineKind
from gateway.routing.precise import refresh_resident

UNPOLLED = frozenset({EngineKind.LITELLM, EngineKind.HOSTED})  # no engine metrics to read
MAX_BACKOFF_S = 60.0


@dataclass(slots=True)
class PollBackoff:
    """When each failing backend is polled next: `due(id, now)`, `failed(id, now, tick)`,
    `succeeded(id)`."""
    failures: dict[str, int] = field(default_factory=dict)
    next_at: dict[str, float] = field(default_factory=dict)

    def due(self, backend_id: str, now: float) -> bool:
        return self.next_at.get(backend_id, 0.0) <= now

    def failed(self, backend_id: str, now: float, tick: float) -> None:
        n = self.failures[backend_id] = self.failures.get(backend_id, 0) + 1
        self.next_at[backend_id] = now + min(MAX_BACKOFF_S, tick * 2 ** n)

    def succeeded(self, backend_id: str) -> None:
        self.failures.pop(backend_id, None)
        self.next_at.pop(backend_id, None)

    def keep_only(self, backend_ids) -> None:
        for gone in self.failures.keys() - set(backend_ids):
            self.succeeded(gone)


async def poll_engine_load(state) -> None:
    """Refresh engine-reported load for every backend in the snapshot, forever."""
    interval = state.settings.routing.load_poll_interval_s
    backoff = PollBackoff()
    try:
        while True:
            backends = {b.id: b for m in state.snapshot.models.values() for b in m.backends
                        if b.state == BackendState.READY and b.engine not in UNPOLLED}
            backoff.keep_only(backends)
            now = time.monotonic()
            polled = [b for b in backends.values() if backoff.due(b.id, now)]
            polls = [_poll_one(state, b) for b in polled]
            if state.settings.routing.prefix_precise:
                polls += [refresh_resident(state, b) for b in backends.values()
                          if b.engine == EngineKind.BUILTIN]
                state.kv_events.sync(b for b in backends.values() if b.engine != EngineKind.BUILTIN)
            results = await asyncio.gather(*polls, return_exceptions=True)
            for backend, result in zip(polled, results):
                if isinstance(result, BaseException):
                    backoff.failed(backend.id, now, interval)
                else:
                    backoff.succeeded(backend.id)
                    state.router.book.report(backend.id, result)
            await asyncio.sleep(interval)
    finally:
        state.kv_events.close()


async def _poll_one(state, backend):
    async with asyncio.timeout(max(0.5, state.settings.routing.load_poll_interval_s)):
        return await state.adapters.get(backend).load()

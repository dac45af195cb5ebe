"""Warm tier: LoRA adapters loaded on shared base-model engines, least recently used first out.

Adapters are loaded and unloaded through the engine's runtime adapter API (vLLM's
/v1/load_lora_adapter and /v1/unload_lora_adapter; the built-in engine speaks the same).
Each engine has `max_loras` slots. When a request needs an adapter no engine holds, it goes
to an engine with a free slot, else the least recently used adapter is evicted, but only one
that has been resident for `min_residency_s`: loading costs seconds, and evicting what was
just loaded would make two alternating adapters thrash. When every slot is too young the
request waits (up to its budget) or goes elsewhere (AdapterSlotsBusy says how long to wait).
BackendAdapter rows follow every load and unload, so LoRA-affinity routing sees them.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable

import httpx
from sqlalchemy.orm import sessionmaker

from common.error_codes import ErrorCode
from common.vocabulary import BackendState, EngineKind
from control_plane.tiers import store
from control_plane.tiers.store import BackendRow, TierError
from engine_adapter import EngineError, create_adapter, engine_keys

log = logging.getLogger("inferplane.tiers.adapters")


class AdapterSlotsBusy(TierError):
    status, code = 503, ErrorCode.ADAPTER_SLOTS_BUSY

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message, retry_after=retry_after_s)
        self.retry_after_s = retry_after_s


class NoEngineForAdapter(TierError):
    status, code = 503, ErrorCode.NO_READY_BACKEND


class AdapterLoadFailed(TierError):
    status, code = 502, ErrorCode.ADAPTER_LOAD_FAILED


@dataclass
class Residency:
    loaded_at: float
    last_used: float


@dataclass
class _Plan:
    backend: BackendRow
    victim: str | None  # adapter to unload first, None when a slot is free


class AdapterManager:
    def __init__(self, sessions: sessionmaker, on_change: Callable[[], Awaitable[None]],
                 max_loras: int = 4, min_residency_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.sessions, self.on_change = sessions, on_change
        self.max_loras, self.min_residency_s, self.clock = max_loras, min_residency_s, clock
        self._resident: dict[str, OrderedDict[str, Residency]] = {}  # url → LRU first
        self._locks: dict[str, asyncio.Lock] = {}
        self._client: httpx.AsyncClient | None = None

    # --- bookkeeping ----------------------------------------------------------------------

    def resident(self, backend_url: str) -> list[str]:
        """Adapters on an engine, least recently used first."""
        return list(self._resident.get(backend_url, {}))

    def note_use(self, backend_url: str, adapter: str) -> None:
        slots = self._resident.get(backend_url)
        if slots is not None and adapter in slots:
            slots[adapter].last_used = self.clock()
            slots.move_to_end(adapter)

    def forget(self, backend_url: str) -> None:
        """The engine is gone (stopped or restarted): it holds no adapters any more."""
        self._resident.pop(backend_url, None)
        self._locks.pop(backend_url, None)

    # --- loading --------------------------------------------------------------------------

    async def ensure_loaded(self, model: str, adapter: str, wait_s: float = 0.0) -> str:
        """The URL of a ready engine of `model` holding `adapter`, loading it if needed."""
        source = await asyncio.to_thread(store.adapter_source, self.sessions, model, adapter)
        deadline = self.clock() + wait_s
        while True:
            backends = [b for b in await asyncio.to_thread(store.backends_of, self.sessions, model)
                        if b.state == BackendState.READY]
            if not backends:
                raise NoEngineForAdapter(f"model '{model}' has no ready engine to load "
                                         f"adapter '{adapter}' on")
            for b in backends:
                if adapter in self._resident.get(b.url, {}):
                    self.note_use(b.url, adapter)
                    return b.url
            plan = self._plan(backends)
            if plan is not None:
                url = await self._execute(model, adapter, source, plan)
                if url is not None:
                    return url
                continue  # the engine's state differed from ours: re-plan with fresh facts
            wait = self._time_to_evictable(backends)
            if self.clock() + wait > deadline:
                raise AdapterSlotsBusy(
                    f"every LoRA slot of '{model}' holds an adapter loaded less than "
                    f"{self.min_residency_s:.0f}s ago", retry_after_s=wait)
            await asyncio.sleep(max(wait, 0.01))

    def _plan(self, backends: list[BackendRow]) -> _Plan | None:
        free = [b for b in backends if len(self._resident.get(b.url, {})) < self.max_loras]
        if free:
            return _Plan(min(free, key=lambda b: len(self._resident.get(b.url, {}))), None)
        now, best = self.clock(), None
        for b in backends:
            for name, r in self._resident.get(b.url, {}).items():
                if now - r.loaded_at >= self.min_residency_s and (
                        best is None or r.last_used < best[0]):
                    best = (r.last_used, b, name)
        return _Plan(best[1], best[2]) if best else None

    def _time_to_evictable(self, backends: list[BackendRow]) -> float:
        """Until some engine's least recently used adapter may go. Waiting for the first
        adapter to mature instead would evict whichever loaded first, used or not."""
        now, waits = self.clock(), []
        for b in backends:
            slots = self._resident.get(b.url)
            if slots:
                lru = min(slots.values(), key=lambda r: r.last_used)
                waits.append(self.min_residency_s - (now - lru.loaded_at))
        return max(min(waits, default=self.min_residency_s), 0.0)

    async def _execute(self, model: str, adapter: str, source: str, plan: _Plan) -> str | None:
        url = plan.backend.url
        async with self._locks.setdefault(url, asyncio.Lock()):
            slots = self._resident.setdefault(url, OrderedDict())
            if adapter in slots:  # a concurrent request loaded it meanwhile
                self.note_use(url, adapter)
                return url
            if plan.victim is not None:
                if plan.victim not in slots:
                    return None
                await self.unload(model, url, plan.victim, engine=plan.backend.engine,
                                  managed=plan.backend.managed)
            elif len(slots) >= self.max_loras:
                return None
            if not await self._load(model, plan.backend, adapter, source):
                return None
        return url

    async def _load(self, model: str, backend: BackendRow, adapter: str, source: str) -> bool:
        engine = create_adapter(backend.url, backend.engine, client=self._http(),
                                managed=backend.managed)
        try:
            await engine.load_adapter(adapter, source)
        except EngineError as exc:
            if exc.status == 400 and "already" in str(exc.body).lower():
                log.info("adapter %s was already on %s; adopting it", adapter, backend.url)
            elif exc.status == 429:  # the engine holds adapters we did not load
                await self.sync(backend)
                raise AdapterSlotsBusy(f"{backend.url} has no free LoRA slot: "
                                       f"{_reason(exc)}", self.min_residency_s) from None
            else:
                raise AdapterLoadFailed(f"loading adapter '{adapter}' on {backend.url} "
                                        f"failed: {_reason(exc)}") from None
        now = self.clock()
        self._resident.setdefault(backend.url, OrderedDict())[adapter] = Residency(now, now)
        log.info("loaded adapter %s on %s", adapter, backend.url)
        await self._record(model, backend.url, adapter, loaded=True)
        return True

    async def unload(self, model: str, backend_url: str, adapter: str,
                     engine: str = EngineKind.BUILTIN, managed: bool = False) -> None:
        client = create_adapter(backend_url, engine, client=self._http(), managed=managed)
        try:
            await client.unload_adapter(adapter)
        except EngineError as exc:
            if exc.status != 400 and exc.status != 404:  # unknown there is unloaded already
                raise AdapterLoadFailed(f"unloading adapter '{adapter}' from {backend_url} "
                                        f"failed: {_reason(exc)}") from None
        self._resident.get(backend_url, {}).pop(adapter, None)
        log.info("unloaded adapter %s from %s", adapter, backend_url)
        await self._record(model, backend_url, adapter, loaded=False)

    async def sync(self, backend: BackendRow) -> None:
        """Adopt the engine's own list of loaded adapters (vLLM lists them in /v1/models with
        a `parent`); ones we did not know count as freshly loaded (not evictable yet)."""
        try:
            keyed = engine_keys.keyed(backend.engine, backend.managed)
            headers = engine_keys.headers_for(backend.url) if keyed else None
            response = await self._http().get(backend.url + "/models", timeout=5.0,
                                              headers=headers)
            cards = response.json().get("data", [])
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("could not list adapters on %s: %s", backend.url, exc)
            return
        names = [c["id"] for c in cards if isinstance(c, dict) and c.get("parent")]
        slots = self._resident.setdefault(backend.url, OrderedDict())
        now = self.clock()
        for name in list(slots):
            if name not in names:
                del slots[name]
        for name in names:
            slots.setdefault(name, Residency(now, now))

    async def _record(self, model: str, url: str, adapter: str, loaded: bool) -> None:
        try:
            changed = await asyncio.to_thread(store.set_adapter_loaded, self.sessions, model,
                                              url, adapter, loaded)
        except TierError:
            return  # an adapter loaded by name only (not in the registry) has no row
        if changed:
            await self.on_change()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _reason(exc: EngineError) -> str:
    body = exc.body or {}
    message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
    return message or exc.message

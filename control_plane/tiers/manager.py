"""The tier manager: which models have engines running, and when that changes.

- hot: pinned. Its template's replicas are kept running (the supervisor restarts a crashed
  engine; the manager starts missing ones); never demoted, never stopped for idleness.
- warm: resident while busy. The engine stays up and LoRA adapters come and go on it
  (AdapterManager); demoted to cold when its request rate falls.
- cold: no engine until a request needs one (`ensure_started`, called through the gateway's
  ColdStarter); stopped again after `idle_s` without requests (scale to zero); promoted to
  warm when its request rate rises.

Every engine counts against `max_engines`. A cold start at the limit stops the least
recently used idle cold engine; when none can go, the start fails with EngineBudgetExhausted
instead of overcommitting the machine.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Callable

import httpx
from sqlalchemy.orm import sessionmaker

from common.error_codes import ErrorCode
from common.vocabulary import BackendState, Tier
from control_plane.bootstrap import set_backend_state
from control_plane.supervisor import EngineProcess, EngineSpec, EngineSupervisor, free_port
from control_plane.tiers import store
from control_plane.tiers.adapters import AdapterManager, NoEngineForAdapter
from control_plane.tiers.config import EngineTemplate, TierConfig
from control_plane.tiers.policy import RateTracker, decide_tier
from control_plane.tiers.store import TierError
from engine_adapter import create_adapter

log = logging.getLogger("inferplane.tiers")


class NoEngineTemplate(TierError):
    status, code = 409, ErrorCode.NOT_STARTABLE


class EngineBudgetExhausted(TierError):
    status, code = 503, ErrorCode.ENGINE_BUDGET_EXHAUSTED


class EngineStartFailed(TierError):
    status, code = 502, ErrorCode.ENGINE_START_FAILED


class TierManager:
    def __init__(self, sessions: sessionmaker, supervisor: EngineSupervisor,
                 on_change: Callable[[], object], config: TierConfig,
                 clock: Callable[[], float] = time.monotonic):
        self.sessions, self.supervisor, self.config, self.clock = sessions, supervisor, config, clock
        self._on_change = on_change
        self.rates = RateTracker(config.rate_window_s)
        self.adapters = AdapterManager(sessions, self.changed, config.max_loras,
                                       config.min_residency_s, clock)
        self._starting: dict[str, asyncio.Task] = {}
        self._last_used: dict[str, float] = {}  # model → last request (or ready) time
        self._tier_since: dict[str, float] = {}
        self._budget = asyncio.Lock()  # start/evict decisions are made one at a time
        self._next_port = config.port_base

    # --- signals --------------------------------------------------------------------------

    async def changed(self) -> None:
        """Tell this process's snapshot source the registry moved."""
        if inspect.iscoroutinefunction(self._on_change):
            await self._on_change()
        else:
            await asyncio.to_thread(self._on_change)

    def note_request(self, model: str, count: int = 1) -> None:
        """The gateway saw `count` requests for `model` (drives idleness and promotion)."""
        now = self.clock()
        self.rates.note(model, now, count)
        self._last_used[model] = now

    async def on_engine_state(self, spec: EngineSpec, state: str) -> None:
        """Supervisor state hook: an engine that went down or restarts has lost its adapters."""
        if state in (BackendState.DOWN, BackendState.STARTING):
            self.adapters.forget(spec.url)
            if await asyncio.to_thread(store.clear_adapters, self.sessions, spec.url):
                await self.changed()

    def engines(self, model: str | None = None) -> list[EngineProcess]:
        return [p for p in self.supervisor.processes.values()
                if model is None or p.spec.name == model]

    # --- cold starts ----------------------------------------------------------------------

    async def ensure_started(self, model: str) -> str:
        """An engine for `model` exists (maybe still loading); returns its OpenAI base URL.
        Concurrent callers share one start; a caller that gives up does not cancel it."""
        self._last_used[model] = self.clock()
        if model not in self._starting:
            existing = sorted(self.engines(model), key=lambda p: not p.running)
            if existing:  # up already, or loading/restarting under the supervisor
                try:
                    await existing[0].wait_ready(self.config.start_timeout_s)
                except (RuntimeError, TimeoutError) as exc:
                    raise EngineStartFailed(f"engine for '{model}' is not ready: {exc}") from None
                return existing[0].spec.url
        return await asyncio.shield(await self._launch(model))

    async def wake(self, model: str, adapter: str | None = None,
                   wait_s: float | None = None) -> str:
        """ensure_started, then (for a LoRA request) the adapter loaded on a ready engine,
        waiting up to `wait_s` (default: the minimum residency) for a slot to free."""
        self.note_request(model, 0)
        if adapter is None:
            return await self.ensure_started(model)
        wait = self.config.min_residency_s if wait_s is None else wait_s
        try:  # a ready engine, supervised or registered from outside, needs no start
            return await self.adapters.ensure_loaded(model, adapter, wait_s=wait)
        except NoEngineForAdapter:
            await self.ensure_started(model)
        return await self.adapters.ensure_loaded(model, adapter, wait_s=wait)

    def status(self) -> list[dict]:
        """What the manager knows per engine-backed or recently requested model."""
        now = self.clock()
        names = set(self.config.engines) | set(self._last_used)
        return [{"model": m, "rate_rps": round(self.rates.rate(m, now), 4),
                 "idle_s": round(now - self._last_used[m], 1) if m in self._last_used else None,
                 "starting": m in self._starting,
                 "engines": [{"url": p.spec.url, "running": p.running,
                              "adapters": self.adapters.resident(p.spec.url)}
                             for p in self.engines(m)]}
                for m in sorted(names)]

    async def _launch(self, model: str) -> asyncio.Task:
        """The task starting one engine for `model` (an existing one when a start is on)."""
        task = self._starting.get(model)
        if task is not None:
            return task
        template = self.config.engines.get(model)
        if template is None:
            await asyncio.to_thread(store.model_tier, self.sessions, model)  # 404 if unknown
            raise NoEngineTemplate(f"model '{model}' has no engine template to start from")
        task = self._starting.get(model)  # re-check: the lookup above yielded
        if task is None:
            task = asyncio.create_task(self._start(model, template), name=f"start {model}")
            self._starting[model] = task
            task.add_done_callback(lambda t: self._start_done(model, t))
        return task

    def _start_done(self, model: str, task: asyncio.Task) -> None:
        if self._starting.get(model) is task:
            del self._starting[model]
        if not task.cancelled() and task.exception() is not None:
            log.warning("start of %s failed: %s", model, task.exception())

    async def _start(self, model: str, template: EngineTemplate) -> str:
        tier = await asyncio.to_thread(store.model_tier, self.sessions, model)
        async with self._budget:
            if tier != Tier.HOT:
                await self._make_room(exclude=model)
            spec = self._spec(model, template)
            await asyncio.to_thread(store.add_managed_backend, self.sessions, model, spec.url,
                                    spec.command(), spec.port, spec.engine)
            await self.changed()
            log.info("starting %s %s engine for %s on :%d", tier, spec.engine, model, spec.port)
            try:
                proc = await self.supervisor.start(spec, wait=False)
            except (OSError, ValueError) as exc:  # no such executable, a bad argument
                await self._forget_backend(spec.url)
                raise EngineStartFailed(f"could not launch the engine for '{model}': {exc}")
        try:
            await proc.wait_ready(self.config.start_timeout_s)
        except (RuntimeError, TimeoutError) as exc:
            await self._stop_engine(proc)
            raise EngineStartFailed(f"engine for '{model}' did not start: {exc}") from None
        if await asyncio.to_thread(set_backend_state, self.sessions, spec.url,
                                   BackendState.READY):
            await self.changed()
        self._last_used[model] = self.clock()  # idleness counts from when it could serve
        return spec.url

    def _spec(self, model: str, template: EngineTemplate) -> EngineSpec:
        port = free_port(self.config.host, preferred=self._next_port)
        self._next_port = port + 1
        return template.spec(model, port, self.config.host)

    async def _make_room(self, exclude: str) -> None:
        while len(self.supervisor.processes) >= self.config.max_engines:
            victim = await self._eviction_victim(exclude)
            if victim is None:
                raise EngineBudgetExhausted(
                    f"all {self.config.max_engines} engines are in use by hot, warm or busy "
                    "models; raise max_engines or demote a model")
            log.info("stopping cold engine %s to make room", victim.spec.name)
            await self._stop_engine(victim)

    async def _eviction_victim(self, exclude: str) -> EngineProcess | None:
        tiers = await asyncio.to_thread(store.model_tiers, self.sessions)
        candidates = [p for p in self.engines() if tiers.get(p.spec.name) == Tier.COLD
                      and p.spec.name != exclude and p.spec.name not in self._starting]
        candidates.sort(key=lambda p: self._last_used.get(p.spec.name, 0.0))
        for proc in candidates:
            if not await self._busy(proc):
                return proc
        return None

    async def _busy(self, proc: EngineProcess) -> bool:
        """Requests running or queued on the engine (an idle clock can miss a long stream)."""
        if not proc.running:
            return False
        engine = create_adapter(proc.spec.url, proc.spec.engine, managed=True)
        try:
            load = await engine.load()
        except (httpx.HTTPError, ValueError):
            return False
        finally:
            await engine.aclose()
        return load.running + load.waiting > 0

    async def _stop_engine(self, proc: EngineProcess) -> None:
        await self.supervisor.stop(f"{proc.spec.name}:{proc.spec.port}")
        await self._forget_backend(proc.spec.url)

    async def _forget_backend(self, url: str) -> None:
        self.adapters.forget(url)
        if await asyncio.to_thread(store.remove_backend, self.sessions, url):
            await self.changed()

    # --- the control loop -----------------------------------------------------------------

    async def tick(self) -> None:
        """One pass: tier moves by request rate, resident engines kept, idle cold stopped."""
        tiers = await asyncio.to_thread(store.model_tiers, self.sessions)
        tiers = await self._retier(tiers)
        await self._keep_resident(tiers)
        await self._stop_idle(tiers)

    async def _retier(self, tiers: dict[str, str]) -> dict[str, str]:
        now, c = self.clock(), self.config
        for model, tier in tiers.items():
            dwell = now - self._tier_since.setdefault(model, now)
            room = bool(self.engines(model)) or len(self.supervisor.processes) < c.max_engines
            decision = decide_tier(model, tier, self.rates.rate(model, now), dwell,
                                   promote_rps=c.promote_rps, demote_rps=c.demote_rps,
                                   min_dwell_s=c.min_dwell_s, engine_room=room)
            if decision is None:
                continue
            log.info("%s: %s → %s (%s)", model, tier, decision.target, decision.reason)
            await asyncio.to_thread(store.set_model_tier, self.sessions, model, decision.target)
            tiers[model], self._tier_since[model] = decision.target, now
            await self.changed()
        return tiers

    async def _keep_resident(self, tiers: dict[str, str]) -> None:
        for model, template in self.config.engines.items():
            tier = tiers.get(model)
            if tier not in (Tier.HOT, Tier.WARM) or model in self._starting:
                continue
            missing = template.replicas - len(self.engines(model))
            for _ in range(max(missing, 0)):
                try:
                    await (await self._launch(model))
                except TierError as exc:  # retried next tick
                    log.warning("could not keep %s model %s resident: %s", tier, model, exc)
                    break

    async def _stop_idle(self, tiers: dict[str, str]) -> None:
        now = self.clock()
        for proc in self.engines():
            model = proc.spec.name
            if model not in tiers and model not in self._starting:
                log.info("model %s left the registry: stopping its engine", model)
                await self._stop_engine(proc)
                continue
            if tiers.get(model) != Tier.COLD or model in self._starting:
                continue
            if now - self._last_used.get(model, now) < self.config.idle_s:
                continue
            if await self._busy(proc):
                self._last_used[model] = now
                continue
            log.info("cold model %s idle for %.0fs: stopping its engine", model, self.config.idle_s)
            await self._stop_engine(proc)

    async def run(self) -> None:
        """Tick forever (until cancelled); a failed tick is logged and retried."""
        try:
            while True:
                try:
                    await self.tick()
                except Exception:  # noqa: BLE001 - the database may be down; keep going
                    log.exception("tier manager tick failed")
                await asyncio.sleep(self.config.tick_s)
        finally:
            await self.adapters.aclose()

    async def shutdown(self) -> None:
        for task in list(self._starting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self.adapters.aclose()

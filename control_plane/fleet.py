"""What a control plane runs besides its HTTP API: the configured models and their builtin
engines, the tier manager, health probes and the snapshot poller — started and stopped as one."""
from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from control_plane.settings import Settings


def say(message: str) -> None:
    print(f"[inferplane] {message}", file=sys.stderr, flush=True)


def prepare_database(settings: Settings):
    """Migrations (with progress), the admin key on first start, a session factory."""
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    from control_plane.bootstrap import ensure_admin_key

    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url()
    upgrade(url, progress=lambda msg: say(f"migrations: {msg}"))
    sessions = make_session_factory(url)
    secret, created = ensure_admin_key(sessions, Path(settings.data_dir))
    if created:
        say(f"admin key (shown once, also in {Path(settings.data_dir) / 'admin.key'}): {secret}")
    return sessions


@dataclass
class Fleet:
    tiers: object  # control_plane.tiers.TierManager
    health: object = None  # control_plane.health.HealthProber
    tasks: list[asyncio.Task] = field(default_factory=list)

    def run(self, coro) -> None:
        """Run `coro` in the background for as long as the fleet lives."""
        self.tasks.append(asyncio.create_task(coro))


@contextlib.asynccontextmanager
async def running_fleet(settings: Settings, sessions, snapshots):
    """Register the configured models (and guardrail policies), start their hot builtin
    engines (waiting until they are ready), then keep tiers, health and the snapshot fresh
    until the block exits."""
    from control_plane.backend_allowlist import BackendAllowlist
    from control_plane.bootstrap import register_models, set_backend_state
    from control_plane.guardrail_config import register_guardrails
    from control_plane.health import HealthProber
    from control_plane.supervisor import EngineSupervisor
    from control_plane.tiers import TierManager, tier_config_from_settings

    async def on_state(spec, state):
        if await asyncio.to_thread(set_backend_state, sessions, spec.url, state):
            snapshots.refresh()
        await tiers.on_engine_state(spec, state)

    engines = register_models(sessions, settings)
    register_guardrails(sessions, settings.guardrails)
    supervisor = EngineSupervisor(on_state=on_state, ready_timeout_s=settings.engine_ready_timeout_s)
    tiers = TierManager(sessions, supervisor, snapshots.refresh,
                        tier_config_from_settings(settings))
    fleet = Fleet(tiers)
    try:
        if engines:
            say(f"starting {len(engines)} engine(s): "
                + ", ".join(f"{e.name} on :{e.port}" for e in engines))
        await asyncio.gather(*(supervisor.start(spec) for spec in engines))
        snapshots.refresh()
        fleet.run(snapshots.run())
        fleet.run(tiers.run())
        fleet.health = HealthProber(sessions, on_change=snapshots.refresh,
                                    interval_s=settings.health_interval_s,
                                    allowlist=BackendAllowlist.from_networks(
                                        settings.backends.allowed_networks))
        fleet.run(fleet.health.run())
        yield fleet
    finally:
        for task in fleet.tasks:
            task.cancel()
        say("stopping engines")
        await tiers.shutdown()
        await supervisor.stop_all()

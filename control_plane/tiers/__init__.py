"""Hot, warm and cold model tiers: engine lifecycles, LoRA residency and rate-based moves.

Wiring (in `inferplane up` / `control-plane`):
    tiers = TierManager(sessions, supervisor, snapshots.refresh, tier_config_from_settings(settings))
    app.include_router(build_tiers_router(tiers))
    background.append(asyncio.create_task(tiers.run()))
and the gateway gets `InProcessColdStarter(tiers, snapshots)` (gateway/traffic/coldstart.py).
"""
from control_plane.tiers.adapters import (AdapterLoadFailed, AdapterManager, AdapterSlotsBusy,
                                          NoEngineForAdapter)
from control_plane.tiers.api import build_tiers_router
from control_plane.tiers.config import EngineTemplate, TierConfig, tier_config_from_settings
from control_plane.tiers.manager import (EngineBudgetExhausted, EngineStartFailed, NoEngineTemplate,
                                         TierManager)
from control_plane.tiers.policy import RateTracker, decide_tier
from control_plane.tiers.store import TierError, UnknownAdapter, UnknownModel

__all__ = [
    "AdapterLoadFailed", "AdapterManager", "AdapterSlotsBusy", "EngineBudgetExhausted",
    "EngineStartFailed", "EngineTemplate", "NoEngineForAdapter", "NoEngineTemplate",
    "RateTracker", "TierConfig", "TierError", "TierManager", "UnknownAdapter", "UnknownModel",
    "build_tiers_router", "decide_tier", "tier_config_from_settings",
]

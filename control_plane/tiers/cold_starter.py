"""The cold starter of a gateway inside the control plane's process: wakes models through
the tier manager directly (a gateway running apart uses gateway.traffic.coldstart's
HttpColdStarter over the admin API).

    starter = InProcessColdStarter(tier_manager, snapshot_source)
    await starter.ensure_backend("llama-3-8b", budget_s=30)      # True once a backend is ready
"""
from __future__ import annotations

import asyncio
import logging
import time

from common.errors import InferplaneError
from control_plane.tiers.store import TierError
from gateway.traffic.coldstart import (ADAPTER_REFUSALS, engine_listed, has_ready_backend,
                                       wait_for_snapshot)

log = logging.getLogger("inferplane.coldstart")


class InProcessColdStarter:
    def __init__(self, tiers, snapshot_source):
        self.tiers, self.snapshots = tiers, snapshot_source

    def note_request(self, model_name: str) -> None:
        self.tiers.note_request(model_name)

    async def ensure_backend(self, model_name: str, budget_s: float,
                             adapter: str | None = None) -> bool:
        deadline = time.monotonic() + budget_s
        if has_ready_backend(self.snapshots.current, model_name, adapter):
            return True
        try:  # the start itself is shielded: this request giving up does not cancel it
            await asyncio.wait_for(self.tiers.wake(model_name, adapter), budget_s)
        except asyncio.TimeoutError:
            log.info("cold start of %s still running after the %.0fs budget", model_name, budget_s)
            return False
        except TierError as exc:
            log.warning("cannot start %s: %s", model_name, exc)
            return False
        return await wait_for_snapshot(self.snapshots, model_name, adapter, deadline)

    async def load_adapter(self, model_name: str, adapter: str, budget_s: float) -> str | None:
        deadline = time.monotonic() + budget_s
        try:  # a slot wait longer than the budget is refused at once (adapter_slots_busy)
            url = await asyncio.wait_for(self.tiers.wake(model_name, adapter, wait_s=budget_s),
                                         budget_s)
        except asyncio.TimeoutError:
            log.info("adapter %s of %s not loaded within the %.0fs budget", adapter, model_name,
                     budget_s)
            return None
        except InferplaneError as exc:
            if exc.code in ADAPTER_REFUSALS:
                raise
            log.warning("cannot load adapter %s of %s: %s", adapter, model_name, exc)
            return None
        return await engine_listed(self.snapshots, model_name, url, adapter, deadline)

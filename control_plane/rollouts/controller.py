"""The rollout controller: every tick, one scrape of the gateways' metrics, then each active
rollout moves at most one phase.

    pending      waits for a ready backend of the candidate (and an error budget), then step 0
    progressing  holds step i for pause_s; every analysis interval compares the candidate's
                 traffic with the stable version's over that interval; a step ends once its
                 pause is over and a measurement passed. What a measurement leads to is
                 verdicts.decide: inconclusive is retried, too many failures or too long an
                 inconclusive streak → aborting; after the last step → promoting
    promoting    the alias already points at the candidate; the old version stays routable
                 (weight 0) for warm_delay_s, then succeeded
    aborting     the candidate's weight is 0; one tick later rolled_back

Each transition commits with its audit row and a snapshot-version bump; `on_change` then
runs (e.g. the snapshot source's refresh) so gateways route on it at once. Baselines for
the interval deltas live in memory: after a restart (or a leader change) the first tick of a
step re-baselines, and the counters in the row carry on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from common.vocabulary import RolloutPhase as Phase
from common.vocabulary import SplitMode
from control_plane.rollouts import store
from control_plane.rollouts import transitions as t
from control_plane.rollouts.analysis import Measurement, measure, unavailable
from control_plane.rollouts.gauges import RolloutGauges
from control_plane.rollouts.metrics_source import MetricsUnavailable, Scrape
from control_plane.rollouts.verdicts import decide
from registry.orm.rollouts import Rollout
from registry.queries import audit, bump_snapshot_version

if TYPE_CHECKING:  # slo.py reads Scrape from this package
    from control_plane.slo import SloTracker

log = logging.getLogger("inferplane.rollouts")

ACTOR = "rollout-controller"
DEFAULT_TICK_S = 5.0


@dataclass
class Baseline:
    scrape: Scrape | None  # None: metrics were unavailable when the interval began
    at: float
    due_at: float  # when this interval's measurement is owed


class RolloutController:
    def __init__(self, sessions: Callable[[], Session], metrics_source, on_change=None, *,
                 slo: SloTracker | None = None, registry: CollectorRegistry | None = None,
                 tick_s: float = DEFAULT_TICK_S, clock: Callable[[], float] = time.time):
        self._sessions = sessions
        self.metrics_source = metrics_source
        self.on_change = on_change
        self.slo = slo
        self.gauges = RolloutGauges(registry)
        self.tick_s = tick_s
        self._clock = clock
        self._baselines: dict[int, Baseline] = {}
        self._scrape_error = ""

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad tick (database blip) must not end the controller
                log.exception("rollout tick failed")
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> list[int]:
        """Advance every active rollout once; returns the ids whose routing changed."""
        scrape = await self._scrape()
        changed = await asyncio.to_thread(self._advance_all, scrape)
        if self.slo is not None:
            await asyncio.to_thread(self.slo.export)
        if changed and self.on_change is not None:
            result = self.on_change()
            if inspect.isawaitable(result):
                await result
        return changed

    async def _scrape(self) -> Scrape | None:
        try:
            scrape = await self.metrics_source.scrape()
        except MetricsUnavailable as exc:
            log.warning("no metrics this tick: %s", exc)
            self._scrape_error = str(exc)
            return None
        if self.slo is not None:
            self.slo.observe(scrape)
        return scrape

    def _advance_all(self, scrape: Scrape | None) -> list[int]:
        with self._sessions() as session:
            ids = store.active_ids(session)
        changed = []
        for rollout_id in ids:
            try:
                if self._advance_one(rollout_id, scrape):
                    changed.append(rollout_id)
            except StaleDataError:  # an operator changed it meanwhile; next tick sees that
                log.info("rollout %s changed concurrently; retrying next tick", rollout_id)
        return changed

    def _advance_one(self, rollout_id: int, scrape: Scrape | None) -> bool:
        with self._sessions() as session, session.begin():
            rollout = store.load(session, rollout_id)
            before = (t.phase_of(rollout), rollout.step, rollout.weight)
            self._advance(session, rollout, scrape, self._clock())
            after = (t.phase_of(rollout), rollout.step, rollout.weight)
            if after != before:
                audit(session, ACTOR, f"rollout_{after[0]}", "rollout", rollout.id,
                      before=_image(before), after=_image(after),
                      message=t.status_of(rollout).get("reason", ""))
                bump_snapshot_version(session)
            model = store.model_names(session, [rollout])[rollout.model_id]
        self.gauges.update(model, rollout)  # after the commit: only states that happened
        if after[0] in (Phase.PAUSED, Phase.SUCCEEDED, Phase.ROLLED_BACK):
            self._baselines.pop(rollout_id, None)
        return after != before

    def _advance(self, session: Session, rollout: Rollout, scrape: Scrape | None,
                 now: float) -> None:
        phase = t.phase_of(rollout)
        if phase == Phase.PENDING:
            self._pending(session, rollout, now)
        elif phase == Phase.PROGRESSING:
            self._progressing(session, rollout, scrape, now)
        elif phase == Phase.PROMOTING:
            if now - t.status_of(rollout)["since"] >= t.spec_of(rollout).warm_delay_s:
                t.finish(session, rollout, "old version released after warm delay", now)
        elif phase == Phase.ABORTING:
            t.finish(session, rollout, "candidate weight is 0; rolled back", now)

    # --- phases -------------------------------------------------------------------------

    def _pending(self, session: Session, rollout: Rollout, now: float) -> None:
        spec = t.spec_of(rollout)
        if not store.candidate_ready(session, rollout):
            waited = now - t.status_of(rollout)["since"]
            if waited >= spec.start_timeout_s:
                t.abort(session, rollout, f"no ready backend of version "
                        f"'{rollout.to_version.label}' after {waited:.0f}s", now)
            return
        if self._budget_pause(session, rollout, now):
            return
        t.start_step(session, rollout, 0, "candidate backend ready; step 0", now)

    def _progressing(self, session: Session, rollout: Rollout, scrape: Scrape | None,
                     now: float) -> None:
        if self._budget_pause(session, rollout, now):
            return
        spec = t.spec_of(rollout)
        if spec.analysis is not None and not self._analyse(session, rollout, scrape, now):
            return
        status = t.status_of(rollout)
        step = spec.steps[rollout.step]
        if now - status["step_started_at"] < step.pause_s:
            return
        if spec.analysis is not None and status.get("passed_in_step", 0) < 1:
            return
        if rollout.step + 1 < len(spec.steps):
            t.start_step(session, rollout, rollout.step + 1, f"step {rollout.step} done", now)
        else:
            t.promote(session, rollout, ACTOR, "all steps passed; alias swapped", now)

    def _analyse(self, session: Session, rollout: Rollout, scrape: Scrape | None,
                 now: float) -> bool:
        """Take a measurement when one is due; False when the rollout left progressing."""
        analysis = t.spec_of(rollout).analysis
        baseline = self._baselines.get(rollout.id)
        if baseline is None or baseline.at < t.status_of(rollout)["step_started_at"]:
            self._baselines[rollout.id] = Baseline(scrape, now, now + analysis.interval_s)
            return True
        if baseline.scrape is None and scrape is not None:  # metrics are back: a full
            baseline.scrape, baseline.at = scrape, now       # interval from here
            baseline.due_at = now + analysis.interval_s
        if now < baseline.due_at:
            return True
        result = self._measure(session, rollout, baseline, scrape, now)
        self._baselines[rollout.id] = Baseline(scrape or baseline.scrape, now if scrape else
                                               baseline.at, now + analysis.interval_s)
        decision = decide(result, t.status_of(rollout), analysis)
        t.record_measurement(session, rollout, result, decision)
        if decision.abort:
            t.abort(session, rollout, decision.reason, now, detail=result.as_dict())
            return False
        return True

    def _measure(self, session: Session, rollout: Rollout, baseline: Baseline,
                 scrape: Scrape | None, now: float) -> Measurement:
        analysis = t.spec_of(rollout).analysis
        if scrape is None or baseline.scrape is None:
            return unavailable(self._scrape_error or "no scrape yet", now - baseline.at,
                               analysis)
        stable = rollout.from_version.label if rollout.from_version else ""
        model = store.model_names(session, [rollout])[rollout.model_id]
        try:   # a Prometheus source queries here, in this worker thread
            delta = scrape.since(baseline.scrape)
        except MetricsUnavailable as exc:
            return unavailable(str(exc), now - baseline.at, analysis)
        return measure(delta, model, stable, rollout.to_version.label, analysis,
                       now - baseline.at, mirrored=rollout.spec.get("mode") == SplitMode.SHADOW)

    def _budget_pause(self, session: Session, rollout: Rollout, now: float) -> bool:
        if self.slo is None or t.spec_of(rollout).force:
            return False
        model = store.model_names(session, [rollout])[rollout.model_id]
        spent = self.slo.nearly_spent(session, model)
        if not spent:
            return False
        t.pause(session, rollout, "error budget nearly spent: " +
                "; ".join(b.describe() for b in spent) + "; resume with force to override", now)
        return True


def _image(state: tuple[str, int, float]) -> dict:
    return {"state": state[0], "step": state[1], "weight": state[2]}


__all__ = ["ACTOR", "RolloutController"]

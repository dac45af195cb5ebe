"""What a rollout is asked to do (the POST body, validated) and the phases it moves through.

Phases: pending → progressing (step i) → promoting → succeeded, or → aborting → rolled_back;
paused when the error budget is nearly spent or an operator asks (a paused rollout routes
nothing to the candidate; resuming restarts the step). Measurement semantics: docs/rollouts.md. The registry's `rollouts.state` column holds the coarser state the snapshot builder
routes on (running/paused mean "splits active"); the phase itself lives in the row's status.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.vocabulary import RolloutPhase as Phase
from common.vocabulary import RolloutState, RolloutStrategy, SplitMode, values

PHASES = values(Phase)
PHASE_NUMBER = {phase: phase.code for phase in Phase}  # inferplane_rollout_state values
ACTIVE_PHASES = (Phase.PENDING, Phase.PROGRESSING, Phase.PAUSED, Phase.PROMOTING,
                 Phase.ABORTING)
FINAL_PHASES = (Phase.SUCCEEDED, Phase.ROLLED_BACK)
DB_STATE = {  # phase → registry rollouts.state
    Phase.PENDING: RolloutState.PENDING, Phase.PROGRESSING: RolloutState.RUNNING,
    Phase.PAUSED: RolloutState.PAUSED, Phase.PROMOTING: RolloutState.RUNNING,
    Phase.SUCCEEDED: RolloutState.PROMOTED, Phase.ABORTING: RolloutState.RUNNING,
    Phase.ROLLED_BACK: RolloutState.ROLLED_BACK,
}
STRATEGIES = values(RolloutStrategy)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Step(Strict):
    weight: float = Field(description="share of traffic for the candidate, a fraction in (0, 1]")
    pause_s: float = Field(0.0, ge=0, le=7 * 24 * 3600)

    @field_validator("weight")
    @classmethod
    def _fraction(cls, weight: float) -> float:
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"weight must be a fraction in (0, 1], e.g. 0.1 for 10%; "
                             f"got {weight}")
        return weight


class ErrorRateRatio(Strict):
    ratio_to_stable: float = Field(gt=0, description="candidate rate ≤ ratio × stable rate")


class Analysis(Strict):
    interval_s: float = Field(60.0, gt=0, le=24 * 3600)
    min_requests: int = Field(20, ge=1)
    max_error_rate: float | ErrorRateRatio | None = Field(
        None, description="absolute 5xx fraction (0.02), or {'ratio_to_stable': 1.5}")
    max_p95_latency_ratio: float | None = Field(None, gt=0)
    max_ttft_p95_ratio: float | None = Field(None, gt=0)
    failure_limit: int = Field(0, ge=0, description="failed measurements tolerated; one more "
                                                    "aborts the rollout")
    max_inconclusive: int = Field(
        2, ge=0, le=1000, description="inconclusive measurements in a row tolerated while the "
        "model has traffic (too few requests on a side, no metrics); one more fails the rollout")

    @field_validator("max_error_rate")
    @classmethod
    def _rate(cls, value):
        if isinstance(value, float) and not 0.0 <= value <= 1.0:
            raise ValueError(f"max_error_rate as a number is an absolute fraction in [0, 1]; "
                             f"got {value} (use {{'ratio_to_stable': x}} for a ratio)")
        return value


class RolloutCreate(Strict):
    model: str = Field(min_length=1, max_length=200)
    alias: str = Field("default", min_length=1, max_length=100)
    candidate_version: str = Field(min_length=1, max_length=100)
    strategy: RolloutStrategy = RolloutStrategy.CANARY
    steps: list[Step] = Field(default_factory=list, max_length=100)
    analysis: Analysis | None = None
    warm_delay_s: float = Field(300.0, ge=0, le=24 * 3600,
                                description="how long the old version stays routable after "
                                            "promotion")
    start_timeout_s: float = Field(900.0, gt=0, le=24 * 3600,
                                   description="how long to wait for a ready candidate backend")
    force: bool = Field(False, description="start and continue despite a spent error budget")

    @model_validator(mode="after")
    def _steps_fit_strategy(self) -> RolloutCreate:
        if self.strategy == RolloutStrategy.BLUE_GREEN:
            if len(self.steps) > 1:
                raise ValueError("blue_green switches at once: give at most one step (the "
                                 "analysis gate, whose weight is the share of traffic mirrored)")
            if not self.steps:
                gate = self.analysis.interval_s if self.analysis else 0.0
                self.steps = [Step(weight=1.0, pause_s=gate)]
            return self
        if not self.steps:
            raise ValueError(f"a {self.strategy} rollout needs at least one step")
        weights = [s.weight for s in self.steps]
        if self.strategy == RolloutStrategy.CANARY and weights != sorted(weights):
            raise ValueError(f"canary step weights must not decrease; got {weights}")
        return self


class ResumeBody(Strict):
    force: bool | None = Field(None, description="also override a spent error budget from now on")


def split_mode(strategy: str, phase: str) -> SplitMode:
    """How the snapshot should split traffic now (shadow mirrors, anything else serves).
    blue_green's gate mirrors, so the candidate is measured before it serves anyone."""
    if phase in (Phase.PROMOTING, Phase.SUCCEEDED):
        return SplitMode.SWITCH
    if strategy in (RolloutStrategy.SHADOW, RolloutStrategy.BLUE_GREEN):
        return SplitMode.SHADOW
    return SplitMode.CANARY


__all__ = ["ACTIVE_PHASES", "Analysis", "DB_STATE", "ErrorRateRatio", "FINAL_PHASES", "PHASES",
           "PHASE_NUMBER", "ResumeBody", "RolloutCreate", "STRATEGIES", "Step", "split_mode"]

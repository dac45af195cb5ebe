"""The shared vocabulary: every word the registry, control plane and gateway agree on, once.

StrEnums, so the stored rows, the YAML settings and the JSON answers keep their plain strings
(`Tier.HOT == "hot"`, `json.dumps(Tier.HOT) == '"hot"'`) while code names them, not copies::

    from common.vocabulary import Priority, Tier, values

    if principal.priority == Priority.BATCH: ...
    one_of("tier", values(Tier))                 # CHECK constraint, same text as before
    tier: Tier = Tier.HOT                        # pydantic field: accepts "hot", refuses "hott"

This module imports nothing of the project, so gateway, control_plane and registry all may
import it without cycles.
"""
from __future__ import annotations

import enum
from typing import Literal


def values(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """The plain strings of an enum, in definition order (CHECK constraints, help texts)."""
    return tuple(member.value for member in kind)


class Priority(enum.StrEnum):
    """A key's request class; admission weights it (gateway.traffic.admission.PRIORITY_WEIGHTS)."""

    HIGH = "high"
    STANDARD = "standard"
    BATCH = "batch"


class Role(enum.StrEnum):
    """What a key (or a JWT's role claim) may do: admin > operator > user."""

    ADMIN = "admin"
    OPERATOR = "operator"
    USER = "user"


class Tier(enum.StrEnum):
    """hot: engines always running; warm: kept running, LoRA adapters swapped in on demand;
    cold: started on the first request, stopped when idle."""

    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class RoutingStrategy(enum.StrEnum):
    """How a model's request picks among its candidate backends (gateway.routing.strategies)."""

    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"
    P2C = "p2c"
    PREFIX_AWARE = "prefix_aware"
    WEIGHTED = "weighted"
    LORA_AFFINITY = "lora_affinity"
    SESSION_AFFINITY = "session_affinity"


class BudgetPeriod(enum.StrEnum):
    """UTC calendar periods a spend budget resets on (NULL in the registry: lifetime)."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class BreakerState(enum.StrEnum):
    """Circuit breaker states, compared as their names ("open" == BreakerState.OPEN).

    `code` is the value of inferplane_circuit_breaker_state; the gauge, the dashboards and
    the alert rules all read it from here. Codes grow with severity so that `max` over
    replicas or over a time window shows the worst state seen.
    """

    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"

    @property
    def code(self) -> int:
        return _BREAKER_CODES[self]

    @property
    def label(self) -> str:
        """Human name for legends and docs: "half-open"."""
        return self.value.replace("_", "-")

    @classmethod
    def legend(cls) -> str:
        """ "0 closed, 1 half-open, 2 open": the gauge's help text and the panel description."""
        return ", ".join(f"{s.code} {s.label}" for s in cls)


# The exported gauge value of each state, next to the enum; the dashboards and alert rules are
# generated from it (dashboards/build.py, alerts/build.py) and a test checks the built files.
_BREAKER_CODES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class RolloutStrategy(enum.StrEnum):
    """canary: weighted steps; blue_green: mirrored gate, then all at once; shadow: mirror only."""

    CANARY = "canary"
    BLUE_GREEN = "blue_green"
    SHADOW = "shadow"


class SplitMode(enum.StrEnum):
    """How a snapshot splits a model's traffic between versions (a rollout spec's "mode"):
    canary serves the candidate its weighted share (sticky A/B assignment), shadow serves the
    stable version and mirrors a copy to the candidate, switch has moved the alias over."""

    CANARY = "canary"
    SHADOW = "shadow"
    SWITCH = "switch"


class RolloutPhase(enum.StrEnum):
    """Where a rollout is (control_plane.rollouts.spec): pending → progressing → promoting →
    succeeded, or → aborting → rolled_back; paused in between. `code` is the value of
    inferplane_rollout_state, read by the gauge, the rollouts dashboard and the alert rules."""

    PENDING = "pending"
    PROGRESSING = "progressing"
    PAUSED = "paused"
    PROMOTING = "promoting"
    SUCCEEDED = "succeeded"
    ABORTING = "aborting"
    ROLLED_BACK = "rolled_back"

    @property
    def code(self) -> int:
        return _PHASE_CODES[self]

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


_PHASE_CODES = {phase: n for n, phase in enumerate(RolloutPhase)}  # exported gauge values


class RolloutState(enum.StrEnum):
    """The registry's coarser rollouts.state the snapshot routes on (running/paused: splits
    active); the phase itself lives in the row's status."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"


class BackendState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DOWN = "down"
    DRAINING = "draining"


class VersionKind(enum.StrEnum):
    FULL = "full"
    LORA = "lora"


class VersionStatus(enum.StrEnum):
    REGISTERED = "registered"
    READY = "ready"
    DEPRECATED = "deprecated"
    ARCHIVED = "archived"


class EngineKind(enum.StrEnum):
    """Engine kinds the code treats specially. A backend's `engine` stays an open string: any
    other OpenAI-compatible server is called as OPENAI."""

    OPENAI = "openai"
    BUILTIN = "builtin"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    LITELLM = "litellm"
    HOSTED = "hosted"


class ModelTask(enum.StrEnum):
    """What a model is for: chat and completions, or embeddings (/v1/embeddings only)."""

    CHAT = "chat"
    EMBEDDING = "embedding"


# What a model takes in, as its registry row declares (`modalities`); a request part of any other
# kind is refused before it reaches a model that would silently never see it.
Modality = Literal["text", "image", "audio", "file", "video"]


__all__ = ["BackendState", "BreakerState", "BudgetPeriod", "EngineKind", "Modality", "ModelTask",
           "Priority", "Role", "RolloutPhase", "RolloutState", "RolloutStrategy", "RoutingStrategy",
           "SplitMode", "Tier", "VersionKind", "VersionStatus", "values"]


"""The contract between the scheduler and whatever computes tokens (model runner or simulator)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.sampling_params import SamplingParams


@dataclass
class ScheduledRequest:
    request_id: str
    token_ids: list[int]  # tokens computed this step
    start_pos: int  # num_computed_tokens before this step: the position of token_ids[0]
    block_ids: list[int]  # the request's full block table
    sample: bool  # this step reaches the last known token, so one token is sampled
    params: SamplingParams
    num_output_tokens: int
    lora: str | None = None  # name of the LoRA adapter applied to this request, if any
    # prompt + output ids so far, only for requests with penalties (the sampler reads them)
    history: list[int] | None = None
    num_prompt_tokens: int = 0
    # Drafted tokens appended to token_ids (speculative decoding): the executor samples at
    # each of the last len(spec_token_ids) + 1 positions and returns the accepted run.
    spec_token_ids: list[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  # (device, cpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu, device)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (src, dst)

    @property
    def num_batched_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.scheduled)


class Executor(Protocol):
    def num_blocks_for(self, config: EngineConfig) -> tuple[int, int]:
        """(device blocks, cpu swap blocks) that fit the configured memory budgets."""

    def execute(self, out: SchedulerOutput) -> dict[str, int | list[int]]:
        """Apply swaps/copies, run one forward pass, return request_id -> sampled token (a
        list for requests with drafts: the accepted drafts' targets plus one more)."""

    def release(self, request_id: str) -> None:
        """Forget per-request state (e.g. its seeded generator)."""

"""A request's state: prompt + output tokens and how many of them have K/V in the cache.

There is no separate prefill/decode phase: the scheduler only compares num_computed_tokens
with num_tokens, so chunked prefill, decode and recompute after preemption are the same path.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from builtin_engine.core.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # new, or preempted by recompute (num_computed_tokens back to 0)
    RUNNING = "running"
    SWAPPED = "swapped"  # preempted; its K/V sits in CPU blocks
    FINISHED = "finished"


@dataclass
class RequestOutput:
    request_id: str
    new_token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # stop | length | abort | error
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None
    queue_time_s: float | None = None  # arrival → first scheduled (for queue spans)
    logprobs: list | None = None  # TokenLogprob per new token, when the request asked for them


class Request:
    __slots__ = (
        "request_id", "prompt_token_ids", "token_ids", "params", "priority", "arrival_time",
        "extra_key", "num_computed_tokens", "num_cached_tokens", "status", "finish_reason",
        "error", "block_hashes", "first_scheduled_time", "first_token_time", "last_token_time",
        "num_preemptions", "seq", "lora",
    )

    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 priority: int = 0, arrival_time: float | None = None,
                 extra_key: bytes | None = None, lora: str | None = None) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        # One growing list (prompt + outputs) so scheduling slices it without concatenation.
        self.token_ids = list(prompt_token_ids)
        self.params = params
        self.priority = priority
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.extra_key = extra_key  # e.g. a LoRA id: blocks under different adapters differ
        self.lora = lora  # the LoRA adapter whose weights the forward pass applies
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache (first schedule)
        self.status = RequestStatus.WAITING
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.block_hashes: list[int] = []  # chained hashes of the full blocks so far
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None
        self.num_preemptions = 0
        self.seq = 0  # tie-breaker for equal (priority, arrival_time), set by the scheduler

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_token_ids):]

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def sort_key(self) -> tuple[int, float, int]:
        """Lower priority value first, then earlier arrival."""
        return (self.priority, self.arrival_time, self.seq)

    def append_output(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def finish(self, reason: str, error: str | None = None) -> None:
        self.status = RequestStatus.FINISHED
        self.finish_reason = reason
        self.error = error

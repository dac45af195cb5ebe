"""What a request asks of the sampler and of the stop checks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    stop: list[str] = field(default_factory=list)  # checked on detokenised text, server side
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> logit offset
    presence_penalty: float = 0.0  # OpenAI's: on output tokens already generated
    frequency_penalty: float = 0.0  # OpenAI's: times each output token was generated
    repetition_penalty: float = 1.0  # HF/vLLM's: divides logits of prompt and output tokens
    logprobs: int | None = None  # report the sampled token's logprob and this many top ones
    # structured.matcher_pool.GrammarState of a constrained request (json_schema, tools):
    # the sampler masks its row and advances it; one per request, never shared
    grammar: Any = field(default=None, compare=False, repr=False)

    @property
    def has_penalties(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty
                    or self.repetition_penalty != 1.0)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 1e-5 or self.top_k == 1

"""Drives a ModelRunner with hand-built SchedulerOutputs, as the scheduler would."""
from __future__ import annotations

from dataclasses import dataclass, field

from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
from builtin_engine.core.sampling_params import SamplingParams


class BlockAllocator:
    """Hands out block ids sequentially; tests never free, the pool is large enough."""

    def __init__(self, block_size: int, first: int = 0):
        self.block_size = block_size
        self.next_id = first

    def grow(self, blocks: list[int], num_tokens: int) -> None:
        while len(blocks) * self.block_size < num_tokens:
            blocks.append(self.next_id)
            self.next_id += 1


@dataclass
class Sequence:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    output: list[int] = field(default_factory=list)
    computed: int = 0
    blocks: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def schedule(self, alloc: BlockAllocator, max_tokens: int | None = None) -> ScheduledRequest:
        """Schedule the next chunk (everything not yet computed, or at most max_tokens)."""
        todo = self.tokens[self.computed:]
        chunk = todo if max_tokens is None else todo[:max_tokens]
        alloc.grow(self.blocks, self.computed + len(chunk))
        req = ScheduledRequest(self.request_id, chunk, self.computed, list(self.blocks),
                               sample=len(chunk) == len(todo), params=self.params,
                               num_output_tokens=len(self.output))
        self.computed += len(chunk)
        return req

    def accept(self, results: dict[str, int]) -> None:
        if self.request_id in results:
            self.output.append(results[self.request_id])


def step(runner, alloc: BlockAllocator, seqs: list[Sequence],
         limits: dict[str, int] | None = None) -> dict[str, int]:
    limits = limits or {}
    reqs = [s.schedule(alloc, limits.get(s.request_id)) for s in seqs]
    results = runner.execute(SchedulerOutput(scheduled=reqs))
    for s in seqs:
        s.accept(results)
    return results


def generate(runner, prompt: list[int], max_new_tokens: int, params: SamplingParams | None = None,
             request_id: str = "r", stop_ids: set[int] = frozenset()) -> list[int]:
    """One request alone: a prefill step, then one decode step per token."""
    alloc = BlockAllocator(runner.block_size)
    seq = Sequence(request_id, list(prompt), params or SamplingParams(temperature=0.0))
    while len(seq.output) < max_new_tokens and not (seq.output and seq.output[-1] in stop_ids):
        step(runner, alloc, [seq])
    runner.release(request_id)
    return seq.output

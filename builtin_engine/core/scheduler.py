"""Continuous batching under one token budget per step (vLLM V1 style).

Each step serves running requests first (decode tokens or the next prefill chunk), then admits
waiting ones in (priority, arrival) order while budget, sequence slots and blocks last. When a
running request cannot get a block, the lowest-priority, latest-arriving running request is
preempted: by swap (its blocks copied to CPU) or by recompute (its blocks freed).
"""
from __future__ import annotations

import heapq
import itertools
import time

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
from builtin_engine.core.kv_cache_manager import KVCacheManager
from builtin_engine.core.ngram_proposer import NgramProposer
from builtin_engine.core.prefill_pacer import PrefillPacer
from builtin_engine.core.request import Request, RequestOutput, RequestStatus

# auto mode swaps sequences up to this many tokens (cheap to copy) and recomputes longer
# ones; config.extra["preemption_swap_max_tokens"] overrides it.
DEFAULT_SWAP_MAX_TOKENS = 1024


class Scheduler:
    def __init__(self, config: EngineConfig, num_gpu_blocks: int, num_cpu_blocks: int,
                 max_model_len: int, stop_token_ids: set[int] | frozenset[int] = frozenset(),
                 vocab_size: int | None = None) -> None:
        if config.preemption_mode not in ("recompute", "swap", "auto"):
            raise ValueError(f"unknown preemption_mode {config.preemption_mode!r}")
        self.config = config
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size  # out-of-range ids are refused before they reach a batch
        self.stop_token_ids = frozenset(stop_token_ids)  # eos and friends, unless ignore_eos
        self.kv = KVCacheManager(num_gpu_blocks, config.block_size, config.enable_prefix_caching,
                                 config.watermark, num_cpu_blocks)
        self.swap_max_tokens = int(config.extra.get("preemption_swap_max_tokens",
                                                    DEFAULT_SWAP_MAX_TOKENS))
        self.requests: dict[str, Request] = {}
        self.waiting: list[tuple[tuple, Request]] = []  # heap on Request.sort_key()
        self.running: list[Request] = []
        self.num_swapped = 0
        self.num_preemptions = 0
        self.finished: list[Request] = []  # drained by the engine (metrics, executor release)
        self._pending: list[RequestOutput] = []  # outputs produced between steps
        self._step_swapped_out: list[Request] = []
        self.step_token_gaps: list[float] = []  # inter-token latencies seen in the last step
        self.step_first_tokens: list[Request] = []  # requests whose first token came last step
        self._no_preemption = True
        self._seq = itertools.count()
        self._prefill_room = config.max_num_batched_tokens
        self.pacer = PrefillPacer(config.prefill_itl_stretch, config.decode_prefill_budget,
                                  config.decode_prefill_ratio)
        self._step_decoding = self._step_prefill_cap = 0
        self.proposer = (NgramProposer(config.speculative_ngram, config.num_speculative_tokens)
                         if config.speculative_ngram > 0 else None)
        self.step_spec: list[tuple[int, int]] = []  # (drafted, accepted) per draft last step

    # ---- intake ---------------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        if req.request_id in self.requests:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        req.seq = next(self._seq)
        problem = self._infeasible(req)
        if problem:
            req.finish("error", problem)
            self.finished.append(req)
            self._pending.append(self._output(req, []))
            return
        self.requests[req.request_id] = req
        heapq.heappush(self.waiting, (req.sort_key(), req))

    def _infeasible(self, req: Request) -> str | None:
        n_prompt, max_tokens = req.num_prompt_tokens, req.params.max_tokens
        if n_prompt == 0:
            return "the prompt is empty"
        if max_tokens < 1:
            return f"max_tokens must be at least 1, got {max_tokens}"
        lo, hi = min(req.prompt_token_ids), max(req.prompt_token_ids)
        if lo < 0 or (self.vocab_size is not None and hi >= self.vocab_size):
            return f"prompt token ids must lie in [0, {self.vocab_size}), got {lo}..{hi}"
        if n_prompt + max_tokens > self.max_model_len:
            return (f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds "
                    f"max_model_len {self.max_model_len}")
        need = self.kv.blocks_needed(n_prompt + max_tokens)
        if need > self.kv.num_blocks:
            return (f"prompt + max_tokens needs {need} KV blocks, the cache holds "
                    f"{self.kv.num_blocks}")
        return None

    def abort_request(self, request_id: str, reason: str = "abort",
                      error: str | None = None) -> bool:
        req = self.requests.get(request_id)
        if req is None:
            return False
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self._remove_waiting(req)
        self._finish(req, reason, error)
        self._pending.append(self._output(req, []))
        return True

    def _remove_waiting(self, req: Request) -> None:
        # Aborts are rare, an O(n) removal keeps the heap exact (and its length a true count).
        self.waiting = [item for item in self.waiting if item[1] is not req]
        heapq.heapify(self.waiting)
        if req.status is RequestStatus.SWAPPED:
            self.num_swapped -= 1

    def has_unfinished(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    # ---- scheduling -----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self._step_swapped_out = []
        budget = self.config.max_num_batched_tokens
        self._prefill_room = self._prefill_cap()
        budget = self._schedule_running(out, budget)
        if self._no_preemption:  # memory is short: admitting more would thrash
            self._schedule_waiting(out, budget)
        out.blocks_to_copy = self.kv.take_pending_copies()
        return out

    def _prefill_cap(self) -> int:
        """Prefill tokens this step may take: bounded while running requests decode, by what
        the pacer learnt a decode row and a prompt token cost (prefill_pacer.py)."""
        decoding = sum(1 for r in self.running if r.num_tokens - r.num_computed_tokens == 1)
        self._step_decoding = decoding
        cap = self.config.max_num_batched_tokens
        if self.config.decode_prefill_budget > 0 and decoding:
            free_seqs = max(0, self.config.max_num_seqs - len(self.running))
            rows = len(self.running) + min(len(self.waiting), free_seqs)
            cap = min(cap, self.pacer.room(decoding, rows))
        self._step_prefill_cap = cap
        return cap

    def observe_step_time(self, seconds: float) -> None:
        """The last scheduled step's forward pass took `seconds` (teaches the prefill pacer)."""
        self.pacer.observe(self._step_decoding, self._step_prefill_cap - self._prefill_room,
                           seconds)

    def _chunk(self, req: Request, num_computed: int, budget: int) -> int:
        n = req.num_tokens - num_computed
        cap = self.config.long_prefill_token_threshold
        if cap > 0:
            n = min(n, cap)
        if n > 1:  # a prefill chunk (a decode step is one token)
            n = min(n, self._prefill_room)
        return min(n, budget)

    def _take(self, req: Request, n: int) -> None:
        if req.num_tokens - req.num_computed_tokens > 1:  # a prefill chunk
            self._prefill_room -= n

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        self._no_preemption = True
        running = self.running
        running.sort(key=Request.sort_key)  # nearly sorted already: O(n) in practice
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = self._chunk(req, req.num_computed_tokens, budget)
            if n <= 0:
                i += 1
                continue
            drafts = self._drafts(req, n, budget)
            ids = self.kv.allocate_slots(req, n + len(drafts))
            if ids is None and drafts:  # no room to speculate: a plain decode step
                drafts = []
                ids = self.kv.allocate_slots(req, n)
            while ids is None:
                # Victims come from the tail, which this loop has not reached yet.
                victim = running.pop()
                self._preempt(victim, out)
                if victim is req:
                    break
                ids = self.kv.allocate_slots(req, n)
            if ids is None:
                break
            out.scheduled.append(self._scheduled(req, n, ids, drafts))
            self._take(req, n)
            budget -= n + len(drafts)
            i += 1
        return budget

    def _drafts(self, req: Request, n: int, budget: int) -> list[int]:
        """Draft tokens for a decode step. Only greedy requests without penalties or logprobs
        speculate: their accepted run is exactly what one-token steps would produce."""
        p = req.params
        if (self.proposer is None or n != 1 or req.num_computed_tokens != req.num_tokens - 1
                or not p.greedy or p.has_penalties or p.logprobs is not None
                or p.grammar is not None):  # a grammar advances once per sampled row
            return []
        # The last token is always sampled for real; drafts never overrun max_tokens/context.
        room = min(budget - 1, p.max_tokens - req.num_output_tokens - 1,
                   self.max_model_len - req.num_tokens - 1)
        return self.proposer.propose(req.token_ids, room) if room > 0 else []

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        max_seqs = self.config.max_num_seqs
        while self.waiting and budget > 0 and len(self.running) < max_seqs:
            req = self.waiting[0][1]
            use_watermark = bool(self.running)
            if req.status is RequestStatus.SWAPPED:
                n = self._chunk(req, req.num_computed_tokens, budget)
                if n <= 0 or not self.kv.can_swap_in(req, n, use_watermark):
                    break
                out.blocks_to_swap_in.extend(self.kv.swap_in(req))
                ids = self.kv.allocate_slots(req, n)
                self.num_swapped -= 1
            else:
                computed, num_cached = self.kv.get_computed_blocks(req)
                n = self._chunk(req, num_cached, budget)
                if n <= 0:
                    break  # this step's prefill room is spent
                ids = self.kv.allocate_slots(req, n, computed, num_cached, use_watermark)
                if ids is None:
                    break  # head-of-line: a lower-priority request must not overtake it
                self.kv.record_prefix_lookup(req.num_tokens, num_cached)
                req.num_computed_tokens = num_cached
                if req.first_scheduled_time is None:
                    req.num_cached_tokens = num_cached
            heapq.heappop(self.waiting)
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_time is None:
                req.first_scheduled_time = time.monotonic()
            self.running.append(req)
            out.scheduled.append(self._scheduled(req, n, ids))
            self._take(req, n)
            budget -= n

    def _scheduled(self, req: Request, n: int, block_ids: list[int],
                   drafts: list[int] | None = None) -> ScheduledRequest:
        start = req.num_computed_tokens
        drafts = drafts or []
        return ScheduledRequest(
            request_id=req.request_id, token_ids=req.token_ids[start:start + n] + drafts,
            start_pos=start, block_ids=block_ids, sample=start + n == req.num_tokens,
            params=req.params, num_output_tokens=req.num_output_tokens, lora=req.lora,
            history=req.token_ids if req.params.has_penalties else None,
            num_prompt_tokens=req.num_prompt_tokens, spec_token_ids=drafts)

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self._no_preemption = False
        self.num_preemptions += 1
        victim.num_preemptions += 1
        if self._use_swap(victim) and self.kv.can_swap_out(victim):
            out.blocks_to_swap_out.extend(self.kv.swap_out(victim))
            victim.status = RequestStatus.SWAPPED
            self.num_swapped += 1
            self._step_swapped_out.append(victim)
        else:
            self.kv.free(victim)
            victim.num_computed_tokens = 0
            victim.status = RequestStatus.WAITING
        heapq.heappush(self.waiting, (victim.sort_key(), victim))

    def _use_swap(self, victim: Request) -> bool:
        mode = self.config.preemption_mode
        if self.kv.cpu_pool.num_blocks == 0 or mode == "recompute":
            return False
        return mode == "swap" or victim.num_tokens <= self.swap_max_tokens

    # ---- results --------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput,
                           sampled: dict[str, int | list[int]]) -> list[RequestOutput]:
        outputs, self._pending = self._pending, []
        now = time.monotonic()
        gaps, firsts = self.step_token_gaps, self.step_first_tokens
        gaps.clear()
        firsts.clear()
        self.step_spec.clear()
        any_finished = False
        for s in out.scheduled:
            req = self.requests.get(s.request_id)
            if req is None:
                continue
            num_drafts = len(s.spec_token_ids)
            req.num_computed_tokens += len(s.token_ids) - num_drafts
            if not num_drafts:
                self.kv.cache_computed_blocks(req)
            if not s.sample:
                continue
            result = sampled.get(s.request_id)
            if result is None:
                self._finish(req, "error", "the executor returned no token")
                outputs.append(self._output(req, []))
                any_finished = True
                continue
            tokens = [result] if isinstance(result, int) else result
            if req.first_token_time is None:
                req.first_token_time = now
                firsts.append(req)
            else:
                gaps.append(now - req.last_token_time)
            req.last_token_time = now
            emitted, reason = self._append_tokens(req, tokens)
            if num_drafts:
                self.step_spec.append((num_drafts, len(tokens) - 1))
                # Accepted drafts' K/V is right (each equals its target); blocks that only
                # rejected drafts reached go back to the pool.
                req.num_computed_tokens += len(emitted) - 1
                self.kv.cache_computed_blocks(req)
                self.kv.free_excess_blocks(req, req.num_tokens)
            if reason:
                self._finish(req, reason)
                any_finished = True
            outputs.append(self._output(req, emitted))
        if any_finished:
            self.running = [r for r in self.running if not r.is_finished]
        return outputs

    def _append_tokens(self, req: Request, tokens: list[int]) -> tuple[list[int], str | None]:
        """Append sampled tokens in order until one ends the request: (kept, stop reason)."""
        for i, token in enumerate(tokens):
            req.append_output(token)
            reason = self._stop_reason(req, token)
            if reason:
                return tokens[:i + 1], reason
        return tokens, None

    def fail_step(self, out: SchedulerOutput, error: str) -> list[RequestOutput]:
        """The executor raised: the requests it touched have unknown K/V, so they end."""
        outputs, self._pending = self._pending, []
        touched = [self.requests.get(s.request_id) for s in out.scheduled]
        for req in touched + self._step_swapped_out:
            if req is not None and not req.is_finished:
                self.abort_request(req.request_id, "error", error)
        outputs.extend(self._pending)
        self._pending = []
        return outputs

    def _stop_reason(self, req: Request, token: int) -> str | None:
        p = req.params
        if req.num_output_tokens >= p.min_tokens:
            if not p.ignore_eos and token in self.stop_token_ids:
                return "stop"
            if p.stop_token_ids and token in p.stop_token_ids:
                return "stop"
        if req.num_output_tokens >= p.max_tokens or req.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _finish(self, req: Request, reason: str, error: str | None = None) -> None:
        req.finish(reason, error)
        self.kv.free(req)
        self.requests.pop(req.request_id, None)
        self.finished.append(req)

    def _output(self, req: Request, new_tokens: list[int]) -> RequestOutput:
        return RequestOutput(
            request_id=req.request_id, new_token_ids=new_tokens, finished=req.is_finished,
            finish_reason=req.finish_reason, num_prompt_tokens=req.num_prompt_tokens,
            num_cached_tokens=req.num_cached_tokens, error=req.error,
            queue_time_s=(req.first_scheduled_time - req.arrival_time)
            if req.first_scheduled_time is not None else None)

    def take_finished(self) -> list[Request]:
        finished, self.finished = self.finished, []
        return finished

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) - self.num_swapped

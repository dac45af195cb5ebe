"""The synchronous engine: schedule, execute, update, record metrics — one step at a time."""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable

from builtin_engine.core.block_pool import HASH_DESCRIPTION
from builtin_engine.core.config import EngineConfig
from builtin_engine.core.executor import Executor, SchedulerOutput
from builtin_engine.core.metrics import EngineMetrics
from builtin_engine.core.request import Request, RequestOutput
from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.core.scheduler import Scheduler

log = logging.getLogger(__name__)
STEP_TRACE_ENV = "INFERPLANE_STEP_TRACE"  # a file path: one JSON line per executed step


def _max_model_len(config: EngineConfig, executor: Executor) -> int:
    if config.max_model_len:
        return config.max_model_len
    for source in (executor, getattr(executor, "loaded", None)):
        for attr in ("max_model_len", "context_length"):
            value = getattr(source, attr, None)
            if isinstance(value, int) and value > 0:
                return value
    return config.sim_context_length


def _vocab_size(executor: Executor, tokenizer) -> int | None:
    for source in (executor, getattr(executor, "cfg", None), tokenizer):
        value = getattr(source, "vocab_size", None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _stop_ids(tokenizer, eos_token_id: int | None) -> set[int]:
    ids: set[int] = set()
    if tokenizer is not None:
        ids.update(getattr(tokenizer, "stop_token_ids", None) or ())
        eos_token_id = getattr(tokenizer, "eos_token_id", eos_token_id)
    if eos_token_id is not None:
        ids.add(eos_token_id)
    return ids


class LLMEngine:
    def __init__(self, config: EngineConfig, executor: Executor, tokenizer=None,
                 eos_token_id: int | None = None) -> None:
        self.config = config
        self.executor = executor
        self.tokenizer = tokenizer
        num_gpu_blocks, num_cpu_blocks = executor.num_blocks_for(config)
        self.max_model_len = _max_model_len(config, executor)
        capacity = num_gpu_blocks * config.block_size
        if self.max_model_len > capacity:
            # A longer sequence could never fit; refuse it up front instead of thrashing.
            log.warning("max_model_len %d exceeds the KV cache (%d tokens); capping it",
                        self.max_model_len, capacity)
            self.max_model_len = capacity
        self.scheduler = Scheduler(config, num_gpu_blocks, num_cpu_blocks, self.max_model_len,
                                   _stop_ids(tokenizer, eos_token_id),
                                   _vocab_size(executor, tokenizer))
        self.model_name = config.served_model_name or config.model
        self.metrics = EngineMetrics(self.model_name, {
            "block_size": config.block_size, "num_gpu_blocks": num_gpu_blocks,
            "num_cpu_blocks": num_cpu_blocks,
            "enable_prefix_caching": config.enable_prefix_caching,
            "cache_dtype": config.dtype, "preemption_mode": config.preemption_mode,
        }, num_spec_tokens=config.num_speculative_tokens if config.speculative_ngram else 0)
        self.num_steps = 0
        trace = os.environ.get(STEP_TRACE_ENV, "").strip()
        self._trace = open(trace, "a", buffering=1) if trace else None

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int],
                    params: SamplingParams | None = None, priority: int = 0,
                    arrival_time: float | None = None, extra_key: bytes | None = None,
                    lora: str | None = None) -> None:
        req = Request(request_id, prompt_token_ids, params or SamplingParams(), priority,
                      arrival_time, extra_key, lora)
        self.scheduler.add_request(req)

    def abort_request(self, request_id: str) -> bool:
        return self.scheduler.abort_request(request_id)

    def abort_all(self, reason: str = "abort", error: str | None = None) -> list[RequestOutput]:
        for request_id in list(self.scheduler.requests):
            self.scheduler.abort_request(request_id, reason, error)
        return self._finish_step(self.scheduler.update_from_output(SchedulerOutput(), {}), 0)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- the step -------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        sched = self.scheduler
        out = sched.schedule()
        self._drop_unrunnable(out)
        if out.scheduled or out.blocks_to_swap_out or out.blocks_to_swap_in:
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                sampled = self.executor.execute(out)
            except Exception as exc:  # the loop must outlive a failed forward pass
                log.exception("executor failed; failing %d requests", len(out.scheduled))
                outputs = sched.fail_step(out, f"executor error: {exc!r}")
                return self._finish_step(outputs, 0)
            seconds = time.perf_counter() - started
            sched.observe_step_time(seconds)
            if self._trace is not None:
                self._trace_step(out, started, seconds, time.thread_time() - cpu_started)
        else:
            sampled = {}
        self.num_steps += 1
        outputs = sched.update_from_output(out, sampled)
        take = getattr(self.executor, "take_logprobs", None)
        logprobs = take() if take is not None else {}
        for o in outputs if logprobs else ():
            if o.new_token_ids and o.request_id in logprobs:
                o.logprobs = [logprobs[o.request_id]]
        return self._finish_step(outputs, out.num_batched_tokens)

    def _trace_step(self, out: SchedulerOutput, started: float, seconds: float,
                    cpu_seconds: float) -> None:
        """One line per step for INFERPLANE_STEP_TRACE: when it started, its decode rows and
        prompt tokens, and the forward pass's seconds (the rest of a step is the gap to the
        next line's start)."""
        rows = sum(1 for s in out.scheduled
                   if s.sample and len(s.token_ids) == 1 + len(s.spec_token_ids))
        self._trace.write(json.dumps({
            "t": round(started, 6), "s": round(seconds, 6), "cpu": round(cpu_seconds, 6), "decode_rows": rows,
            "prompt_tokens": out.num_batched_tokens - rows, "running": len(self.scheduler.running),
            "waiting": self.scheduler.num_waiting}) + "\n")

    def _drop_unrunnable(self, out: SchedulerOutput) -> None:
        """End only the requests the executor cannot run (an adapter unloaded since they
        were admitted), so the rest of the batch still takes its step."""
        check = getattr(self.executor, "unrunnable", None)
        errors = check(out.scheduled) if check is not None else {}
        if not errors:
            return
        for request_id, error in errors.items():
            self.scheduler.abort_request(request_id, "error", error)
        out.scheduled = [s for s in out.scheduled if s.request_id not in errors]

    def _finish_step(self, outputs: list[RequestOutput], num_tokens: int) -> list[RequestOutput]:
        sched, m = self.scheduler, self.metrics
        m.observe_step(num_running=len(sched.running), num_waiting=sched.num_waiting,
                       num_swapped=sched.num_swapped, kv_usage=sched.kv.usage,
                       num_tokens=num_tokens, prefix_queries=sched.kv.prefix_queries,
                       prefix_hits=sched.kv.prefix_hits,
                       num_preemptions=sched.num_preemptions)
        num_prompt = 0
        for req in sched.step_first_tokens:
            num_prompt += req.num_prompt_tokens
            m.observe_first_token(req)
        for gap in sched.step_token_gaps:
            m.observe_token_gap(gap)
        m.observe_spec_drafts(sched.step_spec)
        m.observe_tokens(num_prompt, sum(len(o.new_token_ids) for o in outputs))
        now = time.monotonic()
        for req in sched.take_finished():
            m.observe_finished(req, now)
            self.executor.release(req.request_id)
        sched.step_first_tokens.clear()
        sched.step_token_gaps.clear()
        sched.step_spec.clear()
        return outputs

    # ---- introspection --------------------------------------------------------------------
    def stats(self) -> dict:
        sched, kv = self.scheduler, self.scheduler.kv
        queries, hits = kv.prefix_queries, kv.prefix_hits
        return {
            "running": len(sched.running), "waiting": sched.num_waiting,
            "swapped": sched.num_swapped, "kv_cache_usage": kv.usage,
            "num_free_blocks": kv.num_free_blocks, "num_blocks": kv.num_blocks,
            "block_size": kv.block_size, "prefix_cache_queries": queries,
            "prefix_cache_hits": hits, "prefix_cache_hit_rate": hits / queries if queries else 0.0,
            "num_preemptions": sched.num_preemptions, "num_steps": self.num_steps,
            "max_model_len": self.max_model_len,
        }

    def kv_summary(self, max_hashes: int = 4096) -> dict:
        kv = self.scheduler.kv
        hashes = kv.resident_hashes()[-max_hashes:] if max_hashes > 0 else []
        return {
            "block_size": kv.block_size, "num_blocks": kv.num_blocks,
            "num_free_blocks": kv.num_free_blocks,
            "enable_prefix_caching": kv.enable_prefix_caching,
            "num_resident_hashes": kv.num_resident_hashes,
            "resident_hashes": [format(h, "016x") for h in reversed(hashes)],  # newest first
            "hash": dict(HASH_DESCRIPTION),
        }

    # ---- offline use ----------------------------------------------------------------------
    def generate(self, prompts: Iterable[list[int]], params: SamplingParams | None = None,
                 priorities: Iterable[int] | None = None) -> dict[str, RequestOutput]:
        """Run prompts to completion; returns request id ("0", "1", ...) -> merged output."""
        results: dict[str, RequestOutput] = {}
        prios = list(priorities) if priorities is not None else None
        for i, prompt in enumerate(prompts):
            self.add_request(str(i), prompt, params, prios[i] if prios else 0)
            results[str(i)] = RequestOutput(str(i), [])
        while self.has_unfinished():
            for o in self.step():
                merged = results[o.request_id]
                merged.new_token_ids.extend(o.new_token_ids)
                merged.finished, merged.finish_reason = o.finished, o.finish_reason
                merged.num_prompt_tokens, merged.error = o.num_prompt_tokens, o.error
                merged.num_cached_tokens = o.num_cached_tokens
                if o.logprobs:
                    merged.logprobs = (merged.logprobs or []) + o.logprobs
        return results
